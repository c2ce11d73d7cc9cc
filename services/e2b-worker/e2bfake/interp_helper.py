# Persistent Python "kernel" for one e2bfake code-interpreter context.
# Reads one JSON request per line on stdin ({"code": str, "env_vars": {}}),
# writes one JSON message per line on fd 3, ending each execution with
# {"type": "__done__"}. Written for sandboxio; not E2B code.
import ast, base64, datetime, io, json, os, sys, traceback

proto = os.fdopen(3, "w", buffering=1)


def emit(obj):
    proto.write(json.dumps(obj) + "\n")
    proto.flush()


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Stream(io.TextIOBase):
    def __init__(self, name):
        self.name = name

    def writable(self):
        return True

    def write(self, s):
        if s:
            emit({"type": self.name, "text": s, "timestamp": now()})
        return len(s)


REPRS = [("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
         ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_pdf_", "pdf"),
         ("_repr_latex_", "latex"), ("_repr_json_", "json"), ("_repr_javascript_", "javascript")]


def formats(obj):
    out = {}
    for meth, key in REPRS:
        f = getattr(obj, meth, None)
        if callable(f):
            try:
                v = f()
            except Exception:
                v = None
            if v is not None:
                if isinstance(v, bytes):
                    v = base64.b64encode(v).decode()
                out[key] = v
    out["text"] = repr(obj)
    return out


def display(obj):
    emit(dict(type="result", is_main_result=False, **formats(obj)))


ns = {"__name__": "__main__", "display": display}
count = 0
for line in sys.stdin:
    req = json.loads(line)
    count += 1
    saved = {}
    for k, v in (req.get("env_vars") or {}).items():
        saved[k] = os.environ.get(k)
        os.environ[k] = v
    sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
    try:
        tree = ast.parse(req["code"], "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), ns)
            if value is not None:
                emit(dict(type="result", is_main_result=True, **formats(value)))
    except BaseException as e:  # noqa: BLE001 - report everything, like Jupyter
        emit({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": traceback.format_exc()})
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    emit({"type": "number_of_executions", "execution_count": count})
    emit({"type": "__done__"})
