"""vLLM 0.33.0's own `get_pp_indices` (vllm/distributed/utils.py) on a grid of layer counts, pipeline sizes and
VLLM_PP_LAYER_PARTITION strings, for tests/serving/test_pipeline.py to compare capacity's split with.

Run outside the test suite (vLLM is never a test dependency), with the 0.33.0 wheel's Python files on the path:

    pip download vllm==0.33.0 --no-deps -d /tmp/vllmwheel && unzip -q /tmp/vllmwheel/vllm-0.33.0-*.whl 'vllm/*.py' -d /tmp/vllmwheel/full
    pip install --target /tmp/vllm-deps --no-deps psutil pyzmq   # what `import vllm.distributed.utils` needs beyond torch
    env -u VLLM_PP_LAYER_PARTITION PYTHONPATH=/tmp/vllmwheel/full:/tmp/vllm-deps python bench/vllm_pp_reference.py OUT.json

Each case is (num_hidden_layers, pp_size, partition string or null); the result is every rank's (start, end), or the
exception class vLLM raises. vLLM reads the partition from the environment at each call (vllm/envs.py).
"""

from __future__ import annotations

import json
import os
import sys

PARTITIONS = [
    (20, 4, "5,5,5,5"), (20, 4, "4,6,6,4"), (22, 4, "5,6,5,6"), (80, 2, "30,50"), (80, 2, "50,30"), (61, 4, "16,15,15,15"),
    (126, 3, "40,43,43"), (4, 2, "4,0"), (4, 2, "0,4"), (20, 4, " 5, 5,5 ,5"), (20, 4, "+5,5,5,5"), (32, 1, "32"),
    # refused by vLLM
    (20, 4, "5,5,5,5,"), (20, 4, "5,5,5,a"), (20, 4, "5,5,5"), (21, 4, "5,5,5,5"), (32, 1, ""), (32, 2, "16;16"),
    (32, 1, "16,16"), (80, 2, "40.0,40"),
]  # fmt: skip


def case(get_pp_indices, layers: int, pp: int, partition: str | None) -> dict:
    if partition is None:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    else:
        os.environ["VLLM_PP_LAYER_PARTITION"] = partition
    try:
        ranges = [list(get_pp_indices(layers, rank, pp)) for rank in range(pp)]
    except Exception as exc:  # what vLLM raises is the reference
        return {"layers": layers, "pp": pp, "partition": partition, "raises": type(exc).__name__}
    return {"layers": layers, "pp": pp, "partition": partition, "ranges": ranges}


def main(out: str) -> None:
    import vllm
    from vllm.distributed.utils import get_pp_indices

    cases = [case(get_pp_indices, layers, pp, None) for layers in range(1, 131) for pp in range(1, 9) if pp <= layers]
    cases += [case(get_pp_indices, layers, pp, partition) for layers, pp, partition in PARTITIONS]
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    payload = {"vllm": vllm.__version__, "function": "vllm.distributed.utils.get_pp_indices", "cases": cases}
    with open(out, "w") as f:
        json.dump(payload, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
