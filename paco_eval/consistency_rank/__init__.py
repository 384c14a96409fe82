"""ConsistencyRank: a judge's ranking agreement with people (``paco-eval consistency_rank``)."""
