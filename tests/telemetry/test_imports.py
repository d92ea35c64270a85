"""``import taskdecomp`` loads no OpenTelemetry: spans cost nothing until a run is made."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_taskdecomp_imports_no_opentelemetry_module() -> None:
    code = (
        "import json, sys\n"
        "import taskdecomp\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
