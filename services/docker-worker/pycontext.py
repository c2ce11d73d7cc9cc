# The stateful code context's bootstrap (docker worker, run_code with a
# context_id): standard library only. It reads one JSON request per line on
# stdin ({"code": ...}) and answers with JSON lines on its stdout: stdout,
# stderr, result (text/html/markdown/svg/png/jpeg/json, the last expression's
# value as the main result, matplotlib figures as PNG), error
# (name/value/traceback), then done. Output of child processes goes to the
# process's stderr.
import ast, base64, io, json, os, signal, sys, traceback

_chan = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
os.dup2(2, 1)


def _emit(**m):
    _chan.write(json.dumps(m) + "\n")
    _chan.flush()


class _Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name

    def writable(self):
        return True

    def write(self, s):
        if s:
            _emit(**{self._name: s})
        return len(s)

    def flush(self):
        pass


sys.stdout = _Stream("stdout")
sys.stderr = _Stream("stderr")

_REPRS = (("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
          ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_json_", "json"))


def _result(value, main):
    r = {"text": repr(value)}
    if main:
        r["is_main_result"] = True
    for meth, key in _REPRS:
        f = getattr(value, meth, None)
        if not callable(f):
            continue
        try:
            x = f()
        except Exception:
            continue
        if x is None:
            continue
        if isinstance(x, (bytes, bytearray)):
            x = base64.b64encode(x).decode()
        if key == "json" and not isinstance(x, dict):
            continue
        r[key] = x
    _emit(result=r)


def display(*objs):
    for o in objs:
        _result(o, False)


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for n in plt.get_fignums():
        fig = plt.figure(n)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        _emit(result={"text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode()})
    plt.close("all")


_globals = {"__name__": "__main__", "__builtins__": __builtins__, "display": display}


def _run(code):
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), _globals)
        value = eval(compile(last, "<cell>", "eval"), _globals) if last is not None else None
        _figures()
        if value is not None:
            _result(value, True)
    except BaseException as e:
        tb = traceback.format_exc()
        _emit(error={"name": type(e).__name__, "value": str(e), "traceback": tb})


signal.signal(signal.SIGINT, signal.default_int_handler)
_emit(ready=True)
while True:
    try:
        _line = sys.stdin.readline()
    except KeyboardInterrupt:  # an interrupt that came between two runs
        continue
    if not _line:
        break
    try:
        _req = json.loads(_line)
    except ValueError:
        continue
    try:
        _run(_req.get("code", ""))
    except KeyboardInterrupt:
        _emit(error={"name": "KeyboardInterrupt", "value": "", "traceback": "KeyboardInterrupt"})
    _emit(done=True)
