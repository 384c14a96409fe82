"""``paco-eval gedit`` and ``paco-eval vcreward`` end to end through :func:`paco_eval.cli.main`
on the fixtures, the judge a real HTTP endpoint (``chat_server``) or the tiny PaCo evaluator:
the report equals the released figures in reference mode, a re-run makes no judge call, a
results file of other inputs is refused, and a mistyped flag is a usage error naming it."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from PIL import Image

from paco_eval.cli import main
from paco_eval.gedit.data import load_rows
from paco_eval.vcreward.bench import AUTOPIPELINE, LOCAL, accuracy, load_pairs
from tests.paco_eval.conftest import GEDIT_FIXTURE, CannedJudge

VC_PAIRS = Path(__file__).resolve().parents[1] / "data" / "vcreward_ref" / "pairs"
FROZEN = json.loads((GEDIT_FIXTURE / "released_570eba6.json").read_text())


def _gedit_args(server, out: Path, results: Path = GEDIT_FIXTURE / "results") -> list[str]:
    return ["--data", str(GEDIT_FIXTURE), "--images_dir", str(results), "--model_name", "tiny",
            "--output_dir", str(out), "--judge", f"chat:{server.url}@canned"]  # fmt: skip


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _close(got, want) -> bool:
    return (got is None and math.isnan(want)) or abs(got - want) <= 1e-12


def test_judge_specs():
    from paco_eval.gedit.benchmark import GEditConfig
    from paco_eval.vcreward.benchmark import VCRewardConfig
    from paco_reward.errors import ConfigError

    url = "http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct-AWQ"
    gedit = GEditConfig(judge=url).judge_spec("judge")
    assert (gedit.kind, gedit.target, gedit.model) == ("chat", url.split("@")[0], url.split("@")[1])
    assert GEditConfig(judge="org/vlm").judge_spec("judge").kind == "local"
    assert VCRewardConfig(data="d", judge="runs/paco").judge_spec("judge").kind == "paco"
    assert VCRewardConfig(data="d", judge=f"server:{url}").judge_spec("judge").kind == "server"
    for bad, says in (("chat:http://h/v1", "served model's name"), ("pacoo:runs/x", "give one of"),
                      ("chat:ftp://h@m", r"not an http\(s\) URL")):  # fmt: skip
        with pytest.raises(ConfigError, match=says):
            VCRewardConfig(data="d", judge=bad)


def test_help_lists_the_stages(capsys):
    for name, stages in (("gedit", ["generate", "judge", "report", "all"]),
                         ("vcreward", ["judge", "report", "all"])):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0 and f"usage: paco-eval {name}" in out
        assert all(f"    {stage} " in out for stage in stages), out
    assert "    generate " not in out  # vcreward judges judges: it has no generate stage
    assert main(["--help"]) == 0
    assert "gedit" in capsys.readouterr().out


def test_gedit_reference_mode_reports_the_released_figures_and_resumes(chat_server, tmp_path, capsys):
    rows = load_rows(GEDIT_FIXTURE)
    server = chat_server(CannedJudge(rows, GEDIT_FIXTURE / "results").chat)
    args = _gedit_args(server, tmp_path / "eval") + ["--mode", "reference"]
    assert main(["gedit", "judge", *args]) == 0
    asked = server.requests
    assert asked >= 2 * 43  # SC and PQ of every row that has an edit
    assert main(["gedit", "report", *args]) == 0
    report = _report(tmp_path / "eval")
    assert report["benchmark"] == "gedit" and report["mode"] == "reference"
    for lang in ("en", "cn"):  # equal to Step1X-Edit@570eba6's analyze_scores on the fixture
        for part, suffix in (("fullset", ""), ("intersection", "-I")):
            want = FROZEN[lang][part]
            for k, label in enumerate(("SC", "PQ", "O")):
                column = f"{lang.upper()}{suffix} {label}"
                assert _close(report["table"][column], want["avg"][k]), (column, want)
                assert _close(report["groups"]["color_alter"][column], want["color_alter"][k])
    assert report["coverage"]["rows_missing_an_edit"] == 1
    assert report["protocol"]["sc_prompt_sha256"] and report["protocol"]["judge"]["spec"]
    text = (tmp_path / "eval" / "report.md").read_text()
    assert "| micro (all rows) |" in text and "## Coverage" in text
    # a re-run: every row is in the results file, so the judge is not asked again
    capsys.readouterr()
    assert main(["gedit", "judge", *args]) == 0
    assert server.requests == asked and "0 scored" in capsys.readouterr().out


def test_gedit_all_default_mode_counts_what_it_cannot_score(chat_server, tmp_path, capsys):
    rows = load_rows(GEDIT_FIXTURE)
    server = chat_server(CannedJudge(rows, GEDIT_FIXTURE / "results").chat)
    args = _gedit_args(server, tmp_path / "eval") + ["--language", "en"]
    assert main(["gedit", "all", *args]) == 0  # generate: the edits were made elsewhere
    assert "taken as made elsewhere: 21 of 22" in capsys.readouterr().out
    report = _report(tmp_path / "eval")
    assert list(report["table"]) == [f"EN{s} {m}" for s in ("", "-I") for m in ("SC", "PQ", "O")]
    en = report["coverage"]["en"]
    assert en["items"] == 22 and 1 < en["missing"] < 22  # unparsed answers: missing, not guessed
    assert report["coverage"]["rows_missing_an_edit"] == 1
    assert report["coverage"]["guessed_items"] == 0
    assert all(it["SC"] is None or 0 <= it["SC"] <= 10 for it in report["items"].values())
    port = server.url.split(":")[-1].split("/")[0]  # one results file per judge and mode
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == [
        f"judge-chat_http_127.0.0.1_{port}_v1_canned-default.jsonl", "report.json", "report.md"]


def test_gedit_results_of_other_edits_are_refused(chat_server, tmp_path, capsys):
    results = Path(shutil.copytree(GEDIT_FIXTURE / "results", tmp_path / "results"))
    rows = load_rows(GEDIT_FIXTURE)
    canned = [CannedJudge(rows, results)]  # rebuilt below: it knows an edit by its colour
    server = chat_server(lambda images, text: canned[0].chat(images, text))
    args = _gedit_args(server, tmp_path / "eval", results) + ["--language", "en",
                                                               "--groups", "color_alter"]  # fmt: skip
    assert main(["gedit", "judge", *args]) == 0
    edit = next((results / "tiny" / "fullset" / "color_alter" / "en").glob("k*[0-9a-f].png"))
    Image.new("RGB", (16, 16), (1, 2, 3)).save(edit)  # a regenerated edit
    capsys.readouterr()
    for stage in ("judge", "report"):
        assert main(["gedit", stage, *args]) == 1
        err = capsys.readouterr().err
        assert "holds results for other inputs" in err and "--output_dir" in err, err
    # another judge writes its own file: nothing to refuse
    canned[0] = CannedJudge(rows, results)
    other = [a.replace("@canned", "@other") for a in args]
    assert main(["gedit", "judge", *other]) == 0


def test_gedit_usage_errors_name_the_flag(capsys, tmp_path):
    for argv, says in (
        (["gedit", "judge", "--langauge", "en"], "did you mean '--language'?"),
        (["gedit", "report", "--mode", "paper"], "argument --mode: invalid choice: 'paper'"),
        (["gedit", "judge", "--limit", "two"], "argument --limit: expected int"),
    ):
        with pytest.raises(SystemExit) as usage:
            main(argv)
        err = capsys.readouterr().err
        assert usage.value.code == 2 and says in err, err
    base = ["--data", str(GEDIT_FIXTURE), "--output_dir", str(tmp_path)]
    assert main(["gedit", "judge", *base]) == 1
    assert "the judge stage needs --judge" in capsys.readouterr().err
    assert main(["gedit", "judge", *base, "--judge", "paco:some/folder"]) == 1
    assert "--judge 'paco:some/folder': give one of chat:<url>@<model>" in capsys.readouterr().err
    assert main(["gedit", "judge", *base, "--groups", "recolor"]) == 1
    assert "Unknown GEdit-Bench task_type 'recolor'" in capsys.readouterr().err


def _vc_answers() -> dict[str, str]:
    """A chat judge's answer per instruction: right, right in another spelling, a tie, wrong,
    unparseable, right."""
    pairs = load_pairs(VC_PAIRS)
    forms = [lambda w: w, lambda w: w.lower().replace("image ", ""), lambda w: "Tie",
             lambda w: "Image B" if w == "Image A" else "Image A", None, lambda w: w]  # fmt: skip
    out = {}
    for pair, form in zip(pairs, forms):
        out[pair.instruction] = "no JSON, sorry" if form is None else json.dumps({"winner": form(pair.winner)})
    return out


def test_vcreward_chat_judge_end_to_end(chat_server, tmp_path, capsys):
    answers = _vc_answers()

    def answer(images, text):
        assert len(images) == 3  # source, A, B
        return next(a for instruction, a in answers.items() if instruction in text)

    server = chat_server(answer)
    args = ["--data", str(VC_PAIRS), "--output_dir", str(tmp_path / "eval"),
            "--judge", f"chat:{server.url}@PVC-Judge"]  # fmt: skip
    assert main(["vcreward", "judge", *args]) == 0
    assert server.requests == 6
    assert main(["vcreward", "report", *args]) == 0
    report = _report(tmp_path / "eval")
    records = [json.loads(line) for line in next((tmp_path / "eval").glob("judge-*.jsonl")).read_text().splitlines()[1:]]
    want = accuracy(records)["overall"]
    assert report["table"]["accuracy_strict"] == want["accuracy_strict"] == 3 / 6
    assert report["table"]["coverage"] == want["coverage"] == 5 / 6
    assert set(report["groups"]) >= {"color_alteration", "experts chose Image A"}
    assert report["coverage"]["pairs_judged"] == 6 and len(report["coverage"]["tasks_absent_of_the_21"]) == 18
    # the released conventions score the same answers at report time, no judge call
    for reference, convention in (("local", LOCAL), ("autopipeline", AUTOPIPELINE)):
        assert main(["vcreward", "report", *args, "--mode", "reference", "--reference", reference]) == 0
        got = _report(tmp_path / "eval")
        assert got["table"]["accuracy"] == accuracy(records, convention)["overall"]["accuracy"]
    assert main(["vcreward", "judge", *args]) == 0
    assert server.requests == 6 and "0 judged, 6 already in" in capsys.readouterr().out


def test_vcreward_paco_judge_and_stale_and_usage(tiny_model_dir, tmp_path, capsys):
    pairs = Path(shutil.copytree(VC_PAIRS, tmp_path / "pairs"))
    args = ["--data", str(pairs), "--output_dir", str(tmp_path / "eval"),
            "--judge", f"paco:{tiny_model_dir}", "--device", "cpu", "--swap"]  # fmt: skip
    assert main(["vcreward", "all", *args]) == 0
    report = _report(tmp_path / "eval")
    assert report["table"]["pairs"] == 6 and report["table"]["coverage"] == 1.0  # P(Yes) answers
    assert report["protocol"]["judge"]["template"] == "edit_consistency"
    # an edit replaced under the same name: the results file is another run's
    edit = load_pairs(pairs)[0].edits[1]
    Image.new("RGB", (16, 16), (7, 7, 7)).save(edit)
    capsys.readouterr()
    assert main(["vcreward", "report", *args]) == 1
    assert "holds results for other inputs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["vcreward", "judge", "--judge", "paco:x"])
    assert usage.value.code == 2 and "required: --data" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["vcreward", "report", "--data", str(pairs), "--reference", "api"])
    assert usage.value.code == 2 and "argument --reference: invalid choice" in capsys.readouterr().err
    assert main(["vcreward", "judge", "--data", str(pairs), "--judge", "local:x"]) == 1
    assert "give one of chat:<url>@<model>, paco:" in capsys.readouterr().err
