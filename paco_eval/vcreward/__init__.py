"""VCReward-Bench (GEditBench_v2@82bc00e): pairwise visual-consistency accuracy of a judge
against expert labels, in both released conventions and a fixed default (docs/gedit-bench.md)."""
