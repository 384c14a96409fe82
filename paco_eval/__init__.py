"""paco_eval: benchmarks of generators as the papers report them (the library's top layer).

One command runs each benchmark in resumable stages::

    paco-eval t2is judge --images_dir out/images --output_dir out/eval
    paco-eval t2is report --output_dir out/eval
    python -m paco_eval t2is all ...
    paco-eval gedit judge --images_dir results --model_name kontext --judge chat:URL@MODEL
    paco-eval vcreward all --data VCReward-Bench --judge paco:runs/paco-reward

The shared pieces (results store, report writer, modes) are in :mod:`paco_eval.harness`;
each benchmark registers itself in :mod:`paco_eval.registry`. ``paco_eval`` may import every
other package of the library; none of them imports it.
"""

from paco_reward import __version__

__all__ = ["__version__"]
