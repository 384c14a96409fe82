"""``GRPOTrainer``: Flow-GRPO fine-tuning of a LoRA on a registered generator's transformer,
for image sets and edits (PaCo-GRPO; the generators: :mod:`paco_grpo.pipelines`).

Per epoch (one "round"):

1. **Sample** ``num_generations`` images for each of ``prompts_per_epoch`` prompts with the
   current (behaviour) policy, SDE noise only at ``train.noise_steps``, recording the
   latents before/after those steps and their log-probabilities (:mod:`paco_grpo.rollout`).
   The epoch's images are dealt over the processes as one list (a group may span
   processes); the shape is checked at start-up (:mod:`paco_grpo.epoch_shape`).
2. **Reward** every image with each configured reward (NaN = failed item); with
   ``async_rewards`` (default) a batch is scored on a background event loop while the next
   one is sampled (:mod:`paco_grpo.async_rewards`). A reward that failed on more than
   ``max_failed_fraction`` of the epoch's samples stops the run here, on every process,
   with a :class:`~paco_grpo.reward_failures.RewardFailureError`
   (:mod:`paco_grpo.reward_failures`).
3. **Advantages**: aggregate the rewards (log taming by default), centre per prompt
   group, scale by the global or per-group std; gathered over all processes.
4. **Train** only the noise steps with the clipped PPO objective (:mod:`paco_grpo.grpo_loss`,
   advantages clipped to ``±adv_clip_max``) plus ``beta`` x KL to the frozen base, whose
   forward pass runs only when ``beta > 0`` or ``log_kl``. Gradients are synchronised once
   per accumulation window (its last backward); an EMA of the LoRA weights is stepped once
   per optimizer step. One window and its optimizer step are :meth:`GRPOTrainer.training_step`
   (:class:`~paco_grpo.grpo_step.GRPOStep`, which the GPU check times).

Every ``test.eval_epochs`` epochs the EMA weights are evaluated (:mod:`paco_grpo.evaluation`).
State goes through the ``Accelerator``: checkpoints with ``save_state`` / ``load_state``
(:mod:`paco_grpo.checkpointing`; the LoRA adapter loads with the diffusers pipeline's
``load_lora_weights``), metrics through its trackers (``report_to``) and
``metrics.jsonl`` (:mod:`paco_grpo.tracking`). The learning-rate schedule is counted in
optimizer steps of the whole run, the same on any number of processes.

    >>> from paco_grpo import GRPOConfig, GRPOTrainer                     # doctest: +SKIP
    >>> cfg = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml")           # doctest: +SKIP
    >>> history = GRPOTrainer(cfg).train()                                 # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from paco_grpo.advantages import compute_advantages
from paco_grpo.async_rewards import compute_rewards
from paco_grpo.checkpointing import CheckpointManager, check_grpo_output_dir, reshard
from paco_grpo.data import PromptItem, load_prompts
from paco_grpo.epoch_shape import EpochShape, check_sharding
from paco_grpo.evaluation import Evaluator
from paco_grpo.features import ImageFeatures
from paco_grpo.gardo import diversity_advantages, rank_uncertainty, uncertainty_gate
from paco_grpo.gardo_state import GardoState
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_loss import grpo_loss
from paco_grpo.grpo_step import GRPOStep, GRPOStepOutput
from paco_grpo.hacking_signals import advantage_signals, group_std_signals, in_group_diversity
from paco_grpo.pipelines import get_pipeline_spec
from paco_grpo.planning import plan_grpo
from paco_grpo.policy import (
    add_lora,
    add_reference_adapter,
    build_sampler,
    check_pipeline,
    edit_items,
    load_pipeline,
)
from paco_grpo.reward_failures import (
    log_sporadic_failures,
    over_budget,
    pop_failure_reasons,
    reward_failure_error,
)
from paco_grpo.rewards import Reward, build_rewards
from paco_grpo.rollout import EpochRollout, Rollout, reward_inputs
from paco_grpo.tracking import RunLog, sample_caption, save_image_grid
from paco_reward.devices import resolve_device
from paco_reward.errors import InputError
from paco_reward.launch import check_single_job, launched_nodes
from paco_reward.planning import check_plan
from paco_reward.yaml_config import SAVED_CONFIG

logger = logging.getLogger(__name__)

__all__ = ["GRPOTrainer", "grpo_loss"]


class GRPOTrainer:
    """Flow-GRPO trainer of a LoRA on a registered generator (:mod:`paco_grpo.pipelines`:
    FLUX, FLUX-Kontext, Qwen-Image, Qwen-Image-Edit).

    Args:
        config: the :class:`GRPOConfig`.
        rewards: ``{name: reward}``; default: built from ``config.rewards`` via the registry.
        test_rewards: rewards for evaluation; default: ``config.test.rewards`` (or ``rewards``),
            each with its ``config.test.reward_kwargs`` (the training instance where they equal
            the training arguments: :meth:`GRPOConfig.separate_test_rewards`).
        pipeline: an already loaded diffusers pipeline (default: ``from_pretrained``).
    """

    def __init__(
        self,
        config: GRPOConfig,
        rewards: dict[str, Reward] | None = None,
        test_rewards: dict[str, Reward] | None = None,
        pipeline=None,
    ) -> None:
        from accelerate import Accelerator, PartialState
        from accelerate.utils import DistributedType, parse_flag_from_env, set_seed

        self.config = cfg = config
        self.output_dir = Path(cfg.output_dir)

        # --- the launch: one job of a shape the recipe can run, refused before anything
        # loads (the process state only; the Accelerator, which fixes the precision, comes
        # after the rewards load, so a failed start leaves nothing behind in this process)
        state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
        check_single_job(state.num_processes)
        self.shape = EpochShape.from_config(cfg, state.num_processes)
        device = resolve_device(state.device)  # one process: accelerate says "cuda", no index
        # another run's checkpoints and metrics are refused before anything loads
        check_grpo_output_dir(cfg, state.is_main_process)
        state.wait_for_everyone()  # an overwrite's deletions are done before anyone reads
        if state.is_main_process:
            logger.info("PaCo-GRPO: %s.", self.shape.describe())
        state.print(f"paco-grpo: {self.shape.describe()}; device {device}")
        self.plan = check_plan(
            lambda gpu_gb: plan_grpo(cfg, num_processes=state.num_processes, gpu_memory_gb=gpu_gb,
                                     sharded=state.distributed_type == DistributedType.FSDP,
                                     built_rewards=list(rewards or ()),
                                     num_machines=launched_nodes(),
                                     built_test_rewards=list(test_rewards or ())),
            device, skip=cfg.skip_plan_check, is_main_process=state.is_main_process,
        )  # fmt: skip

        # --- data
        self.items = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
        test_file = cfg.test.prompt_file or cfg.prompt_file
        self.test_items = load_prompts(test_file, cfg.prompt_format, cfg.layout)
        if cfg.test.num_prompts:
            self.test_items = self.test_items[: cfg.test.num_prompts]

        # --- rewards (names resolve to classes here only when the caller passed none)
        self.rewards = (
            rewards
            if rewards is not None
            else build_rewards(cfg.rewards, cfg.reward_kwargs, device=device)
        )
        missing = sorted(set(cfg.rewards) - set(self.rewards))
        if missing:
            raise InputError(f"config.rewards names {missing} but no such reward was passed.")
        if test_rewards is None:
            # an evaluation reward with its training arguments is the training instance
            weights = cfg.test.rewards or cfg.rewards
            separate = cfg.separate_test_rewards()
            built = build_rewards({n: weights[n] for n in separate}, separate, device=device)
            test_rewards = {n: built[n] if n in separate else self.rewards[n] for n in weights}
        self.test_rewards = test_rewards

        # --- accelerator (trackers under output_dir) and seeding
        self.accelerator = Accelerator(
            mixed_precision=cfg.mixed_precision,
            log_with=cfg.report_to or None,
            project_dir=str(self.output_dir),
        )
        set_seed(cfg.seed)
        self.rank = self.accelerator.process_index
        self.world = self.accelerator.num_processes
        self.editing = get_pipeline_spec(cfg.pipeline).edits
        self.sharded = self.accelerator.distributed_type == DistributedType.FSDP
        check_sharding(self.sharded, self.editing, self.world)

        # --- pipeline, frozen parts, LoRA, sampler
        self.pipe = pipeline if pipeline is not None else load_pipeline(cfg, device)
        check_pipeline(cfg, self.pipe)
        self.pipe.set_progress_bar_config(disable=True)
        self.transformer = add_lora(cfg, self.pipe)
        if cfg.kl_reference == "adapter":  # GARDO's resettable reference, before prepare
            add_reference_adapter(cfg, self.transformer)
        self.sampler = build_sampler(cfg, self.pipe)
        if self.editing:  # references resized to each resolution's area, once
            multiple = self.sampler.size_multiple
            self.items = edit_items(cfg, self.items, cfg.train.resolution, multiple)
            self.test_items = edit_items(cfg, self.test_items, cfg.test.resolution, multiple)
        self.params = [p for p in self.transformer.parameters() if p.requires_grad]

        # --- optimizer, scheduler, EMA
        from diffusers.training_utils import EMAModel
        from transformers import get_scheduler

        optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.learning_rate,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon,
            weight_decay=cfg.weight_decay,
        )
        # The prepared scheduler steps once per process per optimizer step, so its warm-up
        # and length are given in process-steps: the schedule is then the same on N processes.
        lr_scheduler = get_scheduler(
            cfg.lr_scheduler_type,
            optimizer,
            num_warmup_steps=cfg.warmup_steps * self.world,
            num_training_steps=self.optimizer_steps_per_epoch * cfg.num_train_epochs * self.world,
        )
        self.model, self.optimizer, self.lr_scheduler = self.accelerator.prepare(
            self.transformer, optimizer, lr_scheduler
        )
        # FSDP2 (fully_shard) replaces each parameter by a DTensor shard: the EMA, gradient
        # clipping and evaluation must use the live ones, not those collected before prepare.
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ema = EMAModel(self.params, decay=cfg.ema_decay) if cfg.use_ema else None

        # --- rollouts, the optimizer step, evaluation, checkpoints, logs
        self.rollout = Rollout(cfg, self.sampler, self.items, self.accelerator, self.editing)
        if cfg.feature_model:  # the diversity signal and advantage (paco_grpo.features)
            self.rollout.features = ImageFeatures.from_pretrained(cfg.feature_model, device=device)
        self.step = GRPOStep(
            cfg,
            self.accelerator,
            self.model,
            self.optimizer,
            self.rollout,
            self.params,
            lr_scheduler=self.lr_scheduler,
            ema=self.ema,
            sharded=self.sharded,
        )
        # a test reward of a training reward's name that is another instance is a held-out
        # judge of that criterion: the training judge scores the evaluation images too
        train_judges = {
            n: self.rewards[n]
            for n, r in self.test_rewards.items()
            if n in self.rewards and r is not self.rewards[n]
        }
        self.evaluator = Evaluator(
            self.rollout, self.test_items, self.test_rewards, self.output_dir / "samples",
            train_judges,
        )  # fmt: skip
        gardo = cfg.kl_reference == "adapter" or bool(cfg.kl_gate_rewards)
        self.gardo = GardoState(cfg, self.accelerator, self.model) if gardo else None
        self.checkpoints = CheckpointManager(
            self.accelerator,
            type(self.pipe),
            self.model,
            self.ema,
            self.output_dir / "checkpoints",
            cfg.save_total_limit,
            extra=self.gardo,
        )
        self.log = RunLog(self.accelerator, self.output_dir, cfg.to_dict())
        self.start_epoch = 0
        self.global_step = 0
        self._epoch_images: list[torch.Tensor] = []
        self._epoch_captions: list[str] = []
        self._progress = None  # the epoch bar while train() runs: it shows the epoch's phase
        self._last_phase: str | None = None
        if cfg.resume_from_checkpoint:
            self.load_checkpoint(self.checkpoints.resolve(cfg.resume_from_checkpoint))
        else:  # a fresh start of the folder's own config: its metrics are this run's alone
            self.log.rewind(0)

    @property
    def history(self) -> list[dict]:
        """The metrics of every epoch so far (resumed runs include the earlier ones)."""
        return self.log.history

    @property
    def device(self) -> torch.device:
        """This process's device, with its index (every model of the process lives there)."""
        return resolve_device(self.accelerator.device)

    @property
    def optimizer_steps_per_epoch(self) -> int:
        """Optimizer steps per epoch on this launch (:class:`~paco_grpo.epoch_shape.EpochShape`)."""
        return self.shape.optimizer_steps_per_epoch

    def group_key(self, item: PromptItem) -> str | tuple[str, str]:
        """GRPO group of an item's samples (see :meth:`Rollout.group_key`)."""
        return self.rollout.group_key(item)

    def compute_rewards(
        self, rewards: dict[str, Reward], images: torch.Tensor, items: list[PromptItem]
    ) -> dict[str, np.ndarray]:
        """Run each reward on a batch of images (float CHW in [0, 1]) in this thread."""
        return compute_rewards(rewards, *reward_inputs(images, items)).scores

    # ================================================================== sampling
    def sample_epoch(self, epoch: int) -> EpochRollout:
        """This process's samples of ``epoch`` and their rewards (:meth:`Rollout.sample_epoch`)."""
        model = self.accelerator.unwrap_model(self.model)
        return self.rollout.sample_epoch(
            epoch,
            model,
            self.rewards,
            self.config.num_sample_images,
            progress=lambda phase, done, total: self._phase(epoch, phase, done, total),
        )

    def _phase(self, epoch: int, phase: str, done: int | None = None, total: int | None = None):
        """Progress within epoch ``epoch`` (0-based index; shown 1-based, as checkpoints
        count): the epoch bar's postfix on every call, an INFO line (``-v``) when a phase
        starts."""
        if not self.accelerator.is_main_process:
            return
        count = f" {done}/{total}" if total is not None else ""
        if self._progress is not None:
            self._progress.set_postfix_str(f"{phase}{count}", refresh=True)
        if phase != self._last_phase or done in (None, 0):
            self._last_phase = phase
            unit = f" ({total})" if total is not None else ""
            logger.info("epoch %d/%d: %s%s", epoch + 1, self.config.num_train_epochs, phase, unit)

    # ================================================================== training
    def training_step(
        self,
        samples: list[dict],
        window: list[list[int]],
        advantages: np.ndarray,
        kl_gate: np.ndarray | None = None,
    ) -> GRPOStepOutput:
        """One optimizer step on an accumulation window of minibatches (:class:`GRPOStep`,
        the same object ``benchmarks/gpu_check.py`` times); counts and logs the step, and
        gives its KL to GARDO's reset rule."""
        out = self.step(samples, window, advantages, kl_gate)
        if self.gardo is not None:
            kl = out.stats.get("kl_gated") or out.stats.get("kl")
            self.gardo.observe_step(float(np.mean(kl)) if kl else 0.0)
        self.global_step += 1
        self.log.log_step({"train/lr": out.lr}, self.global_step)
        return out

    def train_epoch(
        self,
        samples: list[dict],
        advantages: np.ndarray,
        epoch: int,
        kl_gate: np.ndarray | None = None,
    ) -> dict:
        """Clipped-PPO updates on the recorded noise steps (the KL on the ``kl_gate``
        samples only, when given); returns the epoch's training stats."""
        cfg = self.config
        advantages = np.clip(advantages, -cfg.adv_clip_max, cfg.adv_clip_max)
        stats: dict[str, list[float]] = {k: [] for k in self.step.stat_keys}
        first_update_ratios: list[torch.Tensor] = []
        lrs: list[float] = []
        grad_norms: list[float] = []
        total = cfg.num_iterations * self.optimizer_steps_per_epoch
        self._phase(epoch, "training", 0, total)
        for iteration in range(cfg.num_iterations):
            for window in self._accumulation_windows(samples, epoch, iteration):
                out = self.training_step(samples, window, advantages, kl_gate)
                self._phase(epoch, "training", len(lrs) + 1, total)
                if not lrs:  # the first optimizer step: still on-policy
                    first_update_ratios = out.ratios
                for key, values in out.stats.items():
                    stats[key].extend(values)
                lrs.append(out.lr)
                grad_norms.append(out.grad_norm)
        metrics = {f"train/{k}": float(np.mean(v)) if v else float("nan") for k, v in stats.items()}
        if first_update_ratios:
            r = torch.cat(first_update_ratios)
            metrics["train/ratio_first_update"] = float(r.mean())
            metrics["train/ratio_first_update_max_dev"] = float((r - 1).abs().max())
        metrics["train/optimizer_steps"] = len(lrs)
        metrics["train/lr"] = lrs[-1] if lrs else float("nan")
        metrics["train/lr_per_step"] = lrs
        metrics["train/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else float("nan")
        return metrics

    def _accumulation_windows(
        self, samples: list[dict], epoch: int, iteration: int
    ) -> list[list[list[int]]]:
        """The minibatches of one pass, grouped into accumulation windows (one optimizer
        step each). Every process runs as many minibatches as the process with most."""
        cfg = self.config
        batches = self.rollout.minibatches(samples, epoch, iteration)
        if self.world > 1:
            counts = self.accelerator.gather(torch.tensor([len(batches)], device=self.device))
            if int(counts.max()) > len(batches):  # only editing sizes make counts differ
                batches = self.rollout.minibatches(samples, epoch, iteration, int(counts.max()))
        accum = cfg.gradient_accumulation_steps
        size = len(batches) if accum == "auto" else accum
        return [batches[w : w + size] for w in range(0, len(batches), size)]

    # ================================================================== evaluation
    def evaluate(self, epoch: int) -> dict:
        """EMA weights, ODE sampling at ``test.resolution``, the test rewards (:class:`Evaluator`)."""
        model = self.accelerator.unwrap_model(self.model)
        # FSDP2: the EMA is swapped into the shards; a gathered unit would keep stale weights
        reshard(model)
        try:
            return self.evaluator(model, self.ema, self.params, epoch)
        finally:
            reshard(model)  # drop the gathered EMA weights: the next forward gathers the restored

    # ================================================================== main loop
    def run_epoch(self, epoch: int) -> dict:
        """Sample, reward, compute advantages and train for one epoch; returns its metrics
        (no evaluation, logging or checkpointing)."""
        cfg = self.config
        t0 = time.perf_counter()
        for reward in self.rewards.values():
            pop_failure_reasons(reward)  # this epoch's reasons only (evaluation shares rewards)
        rollout = self.sample_epoch(epoch)
        # gather rewards and prompt ids from all processes (equal sizes by construction)
        device = self.accelerator.device
        all_rewards = {
            n: self.accelerator.gather(torch.as_tensor(v, dtype=torch.float64, device=device))
            .cpu()
            .numpy()
            for n, v in rollout.rewards.items()
        }
        self.check_reward_failures(all_rewards, epoch)
        ids = torch.as_tensor(rollout.group_ids, device=device)
        all_ids = self.accelerator.gather(ids).cpu().numpy()
        keys = [self.group_key(self.items[i]) for i in all_ids]
        features = None
        if rollout.features is not None:
            local = torch.as_tensor(rollout.features, dtype=torch.float64, device=device)
            features = self.accelerator.gather(local).cpu().numpy()
        result = compute_advantages(
            all_rewards,
            dict(cfg.rewards),
            keys,
            aggregator=cfg.aggregator,
            threshold=cfg.log_taming_threshold,
            std_scope=cfg.std_scope,
            std_floor=cfg.std_floor,
            normalization=cfg.normalization,
        )
        all_advantages, gardo_metrics, gate = self.gardo_terms(
            epoch, result, all_rewards, keys, features
        )
        n_local = len(rollout.samples)
        mine = slice(self.rank * n_local, (self.rank + 1) * n_local)
        advantages = all_advantages[mine]
        self._epoch_images = rollout.images
        self._epoch_captions = self.sample_captions(rollout, advantages)
        t1 = time.perf_counter()
        train_stats = self.train_epoch(
            rollout.samples, advantages, epoch, gate[mine] if gate is not None else None
        )
        t2 = time.perf_counter()
        timings = rollout.timings
        # epochs are counted from 1 in every output, as checkpoint-<n> holds n finished epochs
        metrics = {"epoch": epoch + 1, "train/resolution": cfg.train.resolution}
        for name, values in all_rewards.items():
            metrics[f"reward/{name}/mean"] = float(np.nanmean(values))
            metrics[f"reward/{name}/std"] = float(np.nanstd(values))
        metrics.update(
            {
                "reward/aggregated/mean": float(np.nanmean(result.aggregated)),
                "advantages/mean": float(all_advantages.mean()),
                "advantages/std": float(all_advantages.std()),
                "advantages/abs_mean": float(np.abs(all_advantages).mean()),
                "group_std/mean": result.group_std_mean,
                "group_std/zero_fraction": result.zero_std_fraction,
                "reward/num_failed": result.num_failed,
                **{f"reward/{n}/log_tamed": int(v) for n, v in result.tamed.items()},
                **train_stats,
                **{f"reward/{n}/num_nan": int(np.isnan(v).sum()) for n, v in all_rewards.items()},
                "time/sampling": timings["sampling"],
                "time/reward": timings["reward_wait"],
                "time/reward_wait": timings["reward_wait"],
                "time/reward_compute": timings["reward_compute"],
                "time/training": t2 - t1,
            }
        )
        metrics.update(group_std_signals(all_rewards, keys))  # the hacking signals
        metrics.update(advantage_signals(all_advantages))
        metrics.update(gardo_metrics)
        if features is not None:
            metrics.update(in_group_diversity(features, keys))
        step = time.perf_counter() - t0
        metrics["time/step"] = step
        metrics["time/reward_share"] = timings["reward_wait"] / step if step > 0 else 0.0
        return metrics

    def sample_captions(self, rollout: EpochRollout, advantages: np.ndarray) -> list[str]:
        """The sample grid's captions: each of this process's first images' prompt, rewards
        and advantage (the images, samples and scores share one order)."""
        captions = []
        for i, sample in enumerate(rollout.samples[: len(rollout.images)]):
            values = {n: float(v[i]) for n, v in rollout.rewards.items()}
            prompt = self.items[sample["item"]].prompt
            captions.append(sample_caption(prompt, values, float(advantages[i])))
        return captions

    def gardo_terms(self, epoch: int, result, rewards: dict, keys: list, features):
        """GARDO's options on the gathered epoch (each one alone when configured): the
        diversity-aware advantage, the uncertainty gate of the KL, the reference reset.
        Returns ``(advantages, metrics, gate)`` (``gate`` ``None``: KL on every sample)."""
        cfg = self.config
        advantages, metrics, gate = result.advantages, {}, None
        if cfg.diversity_advantage:
            advantages = diversity_advantages(result.aggregated, keys, features, cfg.adv_clip_max)
        if cfg.kl_gate_rewards:
            auxiliaries = [rewards[n] for n in cfg.kl_gate_rewards]
            u = rank_uncertainty(result.aggregated, auxiliaries, cfg.kl_gate_sign)
            gate = uncertainty_gate(u, self.gardo.kappa)
            metrics["gardo/kappa"] = self.gardo.kappa.kappa
            metrics["gardo/gated_fraction"] = float(gate.mean())
            metrics["gardo/uncertainty_mean"] = float(np.nanmean(u))
        if cfg.kl_reference == "adapter":
            metrics["gardo/reference_reset"] = int(self.gardo.maybe_reset(epoch))
            metrics["gardo/epochs_since_reset"] = epoch - self.gardo.rule.last_reset
        return advantages, metrics, gate

    def check_reward_failures(self, rewards: dict[str, np.ndarray], epoch: int) -> None:
        """Raise :class:`~paco_grpo.reward_failures.RewardFailureError` when a trained reward's
        (weight > 0) NaN share of the epoch's gathered ``rewards`` is over
        ``max_failed_fraction``.

        Every process holds the same gathered scores, so all of them raise together (the
        reasons each recorded are gathered first); failures within the budget are logged.
        """
        from accelerate.utils import gather_object

        cfg = self.config
        failed = over_budget(rewards, cfg.max_failed_fraction, dict(cfg.rewards))
        if not failed:
            if self.accelerator.is_main_process:
                log_sporadic_failures(rewards, cfg.max_failed_fraction, epoch + 1)
            return
        name, count = next(iter(failed.items()))
        reasons = pop_failure_reasons(self.rewards[name])
        if self.world > 1:
            reasons = gather_object(reasons)
        latest = self.checkpoints.latest()
        raise reward_failure_error(
            name,
            count,
            len(rewards[name]),
            epoch=epoch + 1,
            max_failed_fraction=cfg.max_failed_fraction,
            reasons=reasons,
            checkpoint=str(latest) if latest is not None else None,
            also={n: c for n, c in failed.items() if n != name},
        )

    def train(self) -> list[dict]:
        """Run epochs ``start_epoch .. num_train_epochs - 1``; returns the metrics history."""
        from tqdm.auto import tqdm

        cfg = self.config
        if self.accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            cfg.to_yaml(self.output_dir / SAVED_CONFIG)  # reloads with GRPOConfig.from_yaml
        progress = tqdm(
            range(self.start_epoch, cfg.num_train_epochs),
            initial=self.start_epoch,
            total=cfg.num_train_epochs,
            desc="GRPO epochs",
            disable=not self.accelerator.is_main_process,
        )
        self._progress = progress
        for epoch in progress:
            t0 = time.perf_counter()
            metrics = self.run_epoch(epoch)
            last = epoch == cfg.num_train_epochs - 1
            if cfg.test.eval_epochs and ((epoch + 1) % cfg.test.eval_epochs == 0 or last):
                self._phase(epoch, "evaluation")
                te = time.perf_counter()
                metrics.update(self.evaluate(epoch))
                metrics["time/eval"] = time.perf_counter() - te
            metrics["time/epoch"] = time.perf_counter() - t0
            self.log.log_epoch(metrics, self.global_step)
            if self.accelerator.is_main_process and self._epoch_images:
                path = self.output_dir / "samples" / f"train_epoch_{epoch + 1:05d}.png"
                save_image_grid(
                    self._epoch_images, path, self._epoch_captions, min(4, cfg.num_generations)
                )
            if last or (cfg.save_epochs and (epoch + 1) % cfg.save_epochs == 0):
                self.save_checkpoint(epoch + 1)
            progress.set_postfix({n: f"{metrics[f'reward/{n}/mean']:.3f}" for n in cfg.rewards})
        self._progress = None
        progress.close()
        self.accelerator.wait_for_everyone()
        self.log.close()
        return self.history

    # ================================================================== checkpoints
    def save_checkpoint(self, next_epoch: int) -> Path:
        """Write ``checkpoints/checkpoint-<next_epoch>`` through ``Accelerator.save_state``."""
        return self.checkpoints.save(next_epoch)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore LoRA, optimizer, scheduler, EMA, per-process RNG states and the epoch."""
        self.start_epoch = self.checkpoints.load(path)
        self.global_step = self.start_epoch * self.optimizer_steps_per_epoch
        self.log.rewind(self.start_epoch)
        logger.info("resumed from %s at epoch %d", path, self.start_epoch)
