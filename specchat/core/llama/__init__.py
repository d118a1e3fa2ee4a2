"""The only package that imports llama_cpp.

llama.cpp's OpenMP threads spin while they wait for work unless told otherwise. On a machine that
does anything else (the window's own thread, a browser, a build) the spinning threads fight for
the cores: decoding the demo target ran 3-8x slower with spinning than without on a busy 2-core
machine (docs/benchmarks.md). So, unless the user chose a policy, waiting threads sleep. This must
happen before llama.cpp's library (and its OpenMP runtime) loads, which importing any module of
this package does.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
