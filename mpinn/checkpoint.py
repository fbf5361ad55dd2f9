"""Model files: one .npz (no pickles) with the flat parameters and a JSON header; written atomically."""
import json
import os
import tempfile

import numpy as np

from mpinn import __version__
from mpinn.config import ModelSpec, MpinnError

FORMAT = "mpinn-model-1"


def save_model(path, params, spec, meta):
    """Write params + spec + meta to path via a temporary file, fsync and rename: a reader sees
    the old file or the new one, never half of one."""
    header = {"format": FORMAT, "version": __version__, "spec": spec.to_dict(), "meta": meta}
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, params=np.ascontiguousarray(params), header=np.array(json.dumps(header)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_model(path):
    """(params, spec, meta); any unreadable, truncated or foreign file is a clear MpinnError."""
    if not os.path.exists(path):
        raise MpinnError("model file %s does not exist" % path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"][()]))
            params = z["params"]
    except ValueError as e:
        raise MpinnError("%s: refused (it holds pickled objects or is not a model file: %s)" % (path, e))
    except (OSError, EOFError, KeyError, json.JSONDecodeError) as e:
        raise MpinnError("%s is not a readable mpinn model file (%s)" % (path, e))
    except Exception as e:  # zipfile.BadZipFile and friends on truncated files
        raise MpinnError("%s is not a readable mpinn model file (%s: %s)" % (path, type(e).__name__, e))
    if header.get("format") != FORMAT:
        raise MpinnError("%s: unknown model format %r" % (path, header.get("format")))
    spec = ModelSpec.from_dict(header["spec"])
    return params, spec, header["meta"]
