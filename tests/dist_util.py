"""Run a function on several CPU processes with the gloo backend (for tests)."""

import os
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, fn, args, outdir):
    torch.set_num_threads(1)
    # File rendezvous: no TCP port to race for with other tests on the machine.
    dist.init_process_group("gloo", init_method=f"file://{outdir}/rendezvous", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        torch.save({"ok": True, "result": result}, os.path.join(outdir, f"{rank}.pt"))
    except Exception as exc:  # reported to the parent, which re-raises
        torch.save(
            {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()},
            os.path.join(outdir, f"{rank}.pt"),
        )
    # Every rank reaches here (errors are saved, not raised): leave together, then
    # skip interpreter teardown, where gloo's threads can abort the process.
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def run_distributed(fn, world: int = 2, args: tuple = ()) -> list[dict]:
    """Call ``fn(rank, world, *args)`` on ``world`` processes; return each rank's outcome
    as ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": message}``."""
    with tempfile.TemporaryDirectory() as outdir:
        mp.start_processes(
            _worker, args=(world, fn, args, outdir), nprocs=world, start_method="spawn", join=True
        )
        return [torch.load(os.path.join(outdir, f"{r}.pt"), weights_only=False) for r in range(world)]
