#!/bin/bash

# Parameters
#SBATCH --account=ofl
#SBATCH --array=0-3%2
#SBATCH --constraint=a100
#SBATCH --cpus-per-task=8
#SBATCH --error=/shared/ofl/submitit/%A_%a/%A_%a_0_log.err
#SBATCH --gpus-per-node=1
#SBATCH --job-name=ofl
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output=/shared/ofl/submitit/%A_%a/%A_%a_0_log.out
#SBATCH --partition=gpu
#SBATCH --signal=USR2@90
#SBATCH --time=90
#SBATCH --wckey=submitit

# setup
module load cuda
source /shared/ofl/.venv/bin/activate

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /shared/ofl/submitit/%A_%a/%A_%a_%t_log.out --error /shared/ofl/submitit/%A_%a/%A_%a_%t_log.err python -u -m submitit.core._submit /shared/ofl/submitit/%j
