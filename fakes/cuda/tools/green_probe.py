"""What a driver answers to the green-context calls whose rules the fake follows from NVIDIA's documentation
(green_context.c): the device's SM resource, split-by-count results, structured splits that the fake refuses or
accepts, and the error of each. Run it on the H200 and on the fake and compare the two JSON files:

    python fakes/cuda/tools/green_probe.py > $OUT/green_h200.json
    IRONACCEL_FAKE_CUDA_THREADS=16 python -m ironaccel fake run -- python fakes/cuda/tools/green_probe.py
"""

import json

from cuda.bindings import driver as d
from cuda.bindings._internal.utils import FunctionNotFoundError

SM = d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM


def sm_fields(r):
    return {"type": int(r.type), "smCount": r.sm.smCount, "minSmPartitionSize": r.sm.minSmPartitionSize,
            "smCoscheduledAlignment": r.sm.smCoscheduledAlignment, "flags": r.sm.flags}


def params(count, cosched=0, flags=0):
    p = d.CU_DEV_SM_RESOURCE_GROUP_PARAMS()
    p.smCount, p.coscheduledSmCount, p.flags = count, cosched, flags
    return p


def structured(device_sm, *groups):
    try:
        err, result, rem = d.cuDevSmResourceSplit(len(groups), device_sm, 0, [params(*g) for g in groups])
    except (FunctionNotFoundError, RuntimeError):  # older cuda.bindings raise RuntimeError; CUDA 13.1's entry point: the H200's 580 driver (CUDA 13.0) has none
        return {"groups": groups, "error": "cuDevSmResourceSplit is not in this driver"}
    if err != d.CUresult.CUDA_SUCCESS:
        return {"groups": groups, "error": err.name}
    return {"groups": groups, "result": [sm_fields(r) for r in result], "remainder": sm_fields(rem)}


def main() -> None:
    assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
    err, sm = d.cuDeviceGetDevResource(0, SM)
    assert err == d.CUresult.CUDA_SUCCESS, err
    n = sm.sm.smCount
    by_count = []
    for min_count, flags in ((0, 0), (5, 0), (9, 0), (2, 1), (n, 0)):
        err, result, got, rem = d.cuDevSmResourceSplitByCount(64, sm, flags, min_count)
        by_count.append({"minCount": min_count, "flags": flags, "error": err.name, "groups": got,
                         "sizes": [r.sm.smCount for r in result[:got]] if err == d.CUresult.CUDA_SUCCESS else []})
    half = n // 2
    cases = [((8,),), ((10,),), ((8,), (8,)), ((0,),), ((8,), (0,)), ((10, 0, 1),), ((4, 4),), ((8, 3),),
             ((8, 64),), ((half,), (half,)), ((half, 0, 1), (half, 0, 1)), ((n + 2,),)]
    print(json.dumps({"device": sm_fields(sm),
                      "multiprocessors": d.cuDeviceGetAttribute(
                          d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0)[1],
                      "split_by_count": by_count,
                      "structured": [structured(sm, *c) for c in cases]}, indent=1))


if __name__ == "__main__":
    main()
