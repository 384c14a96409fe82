"""GEdit-Bench (Step1X-Edit@570eba6): VIEScore judging of text-guided edits, per group,
language and subset, equal to the released code in its reference mode (docs/gedit-bench.md)."""
