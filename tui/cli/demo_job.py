"""The demo job: a small torch.distributed (gloo, CPU) training loop, run as a binary rank.

``rankvisor demo`` starts 4 copies of this file through the Supervisor (torchrun's
environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_ERROR_FILE). What a
person sees, with the defaults:

- every rank trains a tiny linear model, averaging gradients with ``all_reduce`` each step,
  prints a line every 10 steps and redraws a tqdm-style progress bar with ``\\r``;
- ranks 1 and 3 write ``UserWarning: ... WARNING ...`` lines to stderr (they match the
  default stderr filter, so they land in filtered_stderr.log), rank 0 prints checkpoint lines
  (the stdout filter);
- rank 3 is quiet (no step lines) and at step DEMO_STALL_STEP it stalls, as a rank stuck in
  a data loader would: its bar stops, its CPU drops to zero, and the others wait for it
  inside ``all_reduce`` (their bars say how long). It ignores SIGTERM while stuck, so
  terminating it shows the SIGKILL countdown;
- rank 2 runs a watchdog on its collectives: after waiting DEMO_FAIL_WAIT seconds it raises
  through ``torch.distributed.elastic.multiprocessing.errors.record``, so its error.json holds
  the traceback: the root cause. The other ranks then fail in the broken collective, later.

Knobs (environment): DEMO_FAIL_RANK (2; -1 for none), DEMO_FAIL_WAIT (3 s), DEMO_STALL_RANK
(3; -1 for none), DEMO_STALL_STEP (30), DEMO_STEPS (200), DEMO_STEP_S (0.1 s a step). With
DEMO_STALL_RANK=-1 nothing waits, so nothing fails: every rank finishes and exits 0.

Importing this module is cheap (torch is imported in ``main``); the CLI reads the filters
below without importing it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

DEMO_STDOUT_FILTERS = ("checkpoint",)
"""Duplicate filter for stdout: rank 0's checkpoint lines go to filtered_stdout.log."""
DEMO_STDERR_FILTERS = ("WARNING",)
"""Duplicate filter for stderr: the warnings of ranks 1 and 3 go to filtered_stderr.log."""

DEMO_NPROCS = 4


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _bar(step: int, total: int, started: float, note: str = "") -> str:
    done = step * 20 // max(1, total)
    elapsed = time.monotonic() - started
    rate = step / elapsed if elapsed > 0 else 0.0
    left = (total - step) / rate if rate > 0 else 0.0
    pct = step * 100 // max(1, total)
    bar = "█" * done + " " * (20 - done)
    timing = f"[{elapsed:4.1f}s<{left:4.1f}s, {rate:4.1f}it/s]"
    return f"\rtrain {pct:3d}%|{bar}| {step}/{total} {timing}{note}"


def _stall(rank: int) -> None:
    """Stuck, as a rank in a deadlocked data loader would be: no output, no CPU."""
    print(
        f"UserWarning: rank {rank}: WARNING data loader worker has not answered (stalled)",
        file=sys.stderr,
        flush=True,
    )

    def ignore(signum: int, frame: object) -> None:
        print(
            f"rank {rank}: got signal {signum} while stuck in the data loader; not exiting",
            file=sys.stderr,
            flush=True,
        )

    signal.signal(signal.SIGTERM, ignore)
    while True:
        time.sleep(3600)


def _train() -> int:
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    fail_rank = int(_env_float("DEMO_FAIL_RANK", 2))
    fail_wait = _env_float("DEMO_FAIL_WAIT", 3.0)
    stall_rank = int(_env_float("DEMO_STALL_RANK", 3))
    stall_step = int(_env_float("DEMO_STALL_STEP", 30))
    steps = int(_env_float("DEMO_STEPS", 200))
    step_s = _env_float("DEMO_STEP_S", 0.1)

    torch.manual_seed(1234 + rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    started = time.monotonic()
    quiet = rank == stall_rank
    print(
        f"rank {rank}/{world}: gloo process group up (pid {os.getpid()})"
        + (", quiet: warnings only" if quiet else ""),
        flush=True,
    )

    model = torch.nn.Linear(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    target_w = torch.linspace(-1, 1, 32)
    out = sys.stdout
    for step in range(1, steps + 1):
        if rank == stall_rank and step >= stall_step:
            out.write("\n")
            out.flush()
            _stall(rank)
        x = torch.randn(64, 32)
        y = x @ target_w + 0.1 * torch.randn(64)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            assert param.grad is not None
            work = dist.all_reduce(param.grad, async_op=True)
            waited_from = time.monotonic()
            while not work.is_completed():
                waited = time.monotonic() - waited_from
                if waited > 0.5:
                    out.write(
                        _bar(step - 1, steps, started, f"  waiting {waited:4.1f}s for all_reduce")
                    )
                    out.flush()
                if rank == fail_rank and waited >= fail_wait:
                    # Rank 2's own watchdog: the run's failure, recorded in error.json.
                    raise RuntimeError(
                        f"all_reduce at step {step} did not finish in {waited:.1f}s: "
                        f"a peer is stuck or gone (rank {rank} gives up)"
                    )
                time.sleep(0.01)
            work.wait()
            param.grad /= world
        optimizer.step()
        if not quiet and step % 10 == 0:
            out.write(f"\rstep {step:4d} | loss {loss.item():.4f} | lr 0.05\n")
        if rank == 0 and step % 20 == 0:
            out.write(f"saved checkpoint step {step} to ckpt/step_{step}.pt\n")
        if rank in (1, 3) and step % 25 == 0:
            print(
                f"UserWarning: rank {rank}: WARNING grad norm {loss.item() * 1e3:.0f} clipped "
                f"to 1.0 (step {step})",
                file=sys.stderr,
                flush=True,
            )
        out.write(_bar(step, steps, started))
        out.flush()
        time.sleep(step_s)
    out.write("\n")
    print(f"rank {rank}: done, final loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    return 0


def main() -> int:
    import warnings

    with warnings.catch_warnings():
        # torch warns at import when NumPy is missing (a fresh venv); the demo needs none.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        from torch.distributed.elastic.multiprocessing.errors import record

    try:
        return int(record(_train)() or 0)
    except Exception:
        # ``record`` has written error.json. Exit now: a normal interpreter exit would wait
        # in the gloo process group's destructor for the collective that never finishes.
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
