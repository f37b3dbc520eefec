#!/usr/bin/env bash

#PBS -N dask-worker
#PBS -q gpu
#PBS -A ofl
#PBS -l select=1:ncpus=8:ngpus=1:mem=32GB
#PBS -l walltime=02:00:00
#PBS -l place=excl
module load cuda
source /shared/ofl/.venv/bin/activate
python -m distributed.cli.dask_worker tcp://<scheduler-address>:8786 --name dummy-name --nthreads 8 --memory-limit 29.80GiB --nanny --death-timeout 60 --resources GPU=1
