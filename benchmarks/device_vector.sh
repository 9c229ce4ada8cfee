#!/bin/bash
# The GPU figures of vectorized clients (gpu_throughput.py --parts vector: the per-client loop,
# the vectorized and the graphed step at 10 and 50 clients a round on W, with the GPU's busy
# share), as one prepared command for a lent GPU machine, where neither Ray nor the
# Fashion-MNIST files are installed (this part needs no Ray).
#
# Here, once:   mkdir -p .gpudata/fashion-mnist && echo /.gpudata/ >> .git/info/exclude &&
#               cp /usr/share/datasets/fashion-mnist/*.gz .gpudata/fashion-mnist/
# There:        bash benchmarks/device_vector.sh   (carry .gpudata; about 31 MB)
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD" REUSE_RAY_DATA="$PWD/.gpudata"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
python3 benchmarks/gpu_throughput.py --parts vector --vector-clients 10,50 --vector-rounds 2 \
    2>&1 | tee "${OUT:-/tmp}/vector.log"
