# Sourced by the lab's prepared scripts (gpu_check.sh, cores_check.sh), from the repository root: where the machine
# has no mpiexec, the mpich and mpi4py wheels carried in .whl/ are installed under /tmp/pfx and put on the paths.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --force-reinstall --prefix /tmp/pfx .whl/*.whl || exit 1
  export PYTHONPATH=$(ls -d /tmp/pfx/lib/python3*/site-packages):$PWD LD_LIBRARY_PATH=/tmp/pfx/lib:$LD_LIBRARY_PATH
  export PATH=/tmp/pfx/bin:$PATH
fi
