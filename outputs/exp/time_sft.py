"""usage: time_sft.py THREADS BS STEPS [overrides]: wall/CPU per SFT step (no eval)."""
import sys, time, torch
threads, bs, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
from paco_reward.training import PacoSFTConfig
from paco_reward.training.cli import run_training
kw = eval(sys.argv[4]) if len(sys.argv) > 4 else {}
cfg = dict(output_dir="/tmp/exp/time_sft", model_name_or_path="outputs/exp/standin_f_d4",
    dataset_path="outputs/exp/data144_s0/export", use_lora=False, freeze_vision_tower=True,
    freeze_merger=False, image_min_pixels=12544, image_max_pixels=12544, learning_rate=1e-3,
    lr_scheduler_type="constant", per_device_train_batch_size=bs, first_token_weight=0.5,
    max_steps=steps, logging_steps=10, eval_strategy="no", save_strategy="no", report_to="none",
    use_cpu=True, disable_tqdm=True, seed=0)
cfg.update(kw)
from transformers import TrainerCallback
marks = {}
class Mark(TrainerCallback):
    def on_step_end(self, args, state, control, **k):
        if state.global_step in (20, steps):
            marks[state.global_step] = (time.perf_counter(), time.process_time())
import paco_reward.training.cli as tcli
w, c = time.perf_counter(), time.process_time()
from paco_reward.training import PacoSFTTrainer
orig = PacoSFTTrainer.__init__
def init(self, *a, **k):
    orig(self, *a, **k); self.add_callback(Mark()); marks["init"] = (time.perf_counter() - w, time.process_time() - c)
PacoSFTTrainer.__init__ = init
run_training(PacoSFTConfig(**cfg))
n = steps - 20
print(f"RESULT setup {marks['init'][0]:.1f}s; steady wall/step={(marks[steps][0]-marks[20][0])/n:.3f} cpu/step={(marks[steps][1]-marks[20][1])/n:.3f}")
print(f"RESULT threads={threads} bs={bs} steps={steps} wall/step={(time.perf_counter()-w)/steps:.3f} cpu/step={(time.process_time()-c)/steps:.3f}")
