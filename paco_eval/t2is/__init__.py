"""T2IS-Bench (text-to-image-set generation): data, consistency and alignment judging, report."""
