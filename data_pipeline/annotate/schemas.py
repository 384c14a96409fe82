"""Request bodies of the annotation app (pydantic); anything else in a body is refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data_pipeline.annotate.config import check_annotator

CandidateId = Annotated[str, Field(min_length=1, max_length=256)]


class RankingIn(BaseModel):
    """One annotator's ranking of one instance: candidate ids in tie groups, best first.

    >>> RankingIn(annotator="alice", instance_id="ab12", ranking=[["1_2"], ["1_0", "1_1"]]).ranking
    [['1_2'], ['1_0', '1_1']]
    """

    model_config = ConfigDict(extra="forbid")

    annotator: str = Field(max_length=64, description="Who ranked (the store's annotator id).")
    instance_id: str = Field(min_length=1, max_length=128, description="The ranked instance.")
    ranking: list[Annotated[list[CandidateId], Field(max_length=64)]] = Field(
        min_length=1, max_length=64, description="Tie groups of candidate ids, best first."
    )
    seconds: float | None = Field(
        default=None, ge=0, le=86400, description="Time the annotator spent on the screen."
    )

    @field_validator("annotator")
    @classmethod
    def _annotator(cls, value: str) -> str:
        return check_annotator(value)


class SessionIn(BaseModel):
    """The shared key, exchanged for a session cookie."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(max_length=1024)
