#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -p gpu
#SBATCH -A ofl
#SBATCH -n 1
#SBATCH --cpus-per-task=8
#SBATCH --mem=30G
#SBATCH -t 02:00:00
#SBATCH --gres=gpu:2
#SBATCH --constraint=a100
module load cuda
source /shared/ofl/.venv/bin/activate
python -m distributed.cli.dask_worker tcp://<scheduler-address>:8786 --name dummy-name --nthreads 8 --memory-limit 29.80GiB --nanny --death-timeout 60 --resources GPU=2
