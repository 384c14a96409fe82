"""EditReward-Bench: a judge's pairwise editing preferences against people's (``paco-eval edit_reward_bench``)."""
