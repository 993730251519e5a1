"""Run a function on several CPU processes with the gloo backend (for tests)."""

import os
import socket
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, fn, args, outdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        torch.save({"ok": True, "result": result}, os.path.join(outdir, f"{rank}.pt"))
    except Exception as exc:  # reported to the parent, which re-raises
        torch.save({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc()}, os.path.join(outdir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_distributed(fn, world: int = 2, args: tuple = ()) -> list[dict]:
    """Call ``fn(rank, world, *args)`` on ``world`` processes; return each rank's outcome
    as ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": message}``."""
    with tempfile.TemporaryDirectory() as outdir:
        mp.start_processes(_worker, args=(world, _free_port(), fn, args, outdir), nprocs=world,
                           start_method="spawn", join=True)
        return [torch.load(os.path.join(outdir, f"{r}.pt"), weights_only=False) for r in range(world)]
