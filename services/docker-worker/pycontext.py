# The stateful code context's bootstrap (docker worker, run_code with a
# context_id): standard library only. It reads one JSON request per line on
# stdin ({"code": ...}) and answers with JSON lines on its stdout: stdout,
# stderr, result (text/html/markdown/svg/png/jpeg/json, the last expression's
# value as the main result, matplotlib figures as PNG), error
# (name/value/traceback), then done. plt.show() and the end of a run emit the
# open figures; a figure as the last expression is the main result, as PNG.
# Output of child processes goes to the process's stderr.
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
        if _is_figure(o):
            _figure_result(o, False)
        else:
            _result(o, False)


def _is_figure(value):
    mfig = sys.modules.get("matplotlib.figure")
    return mfig is not None and isinstance(value, mfig.Figure)


def _figure_result(fig, main):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    r = {"text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode()}
    if main:
        r["is_main_result"] = True
    _emit(result=r)


def _figures(skip=None):
    # The open matplotlib figures, as PNG results, then closed (Jupyter's
    # inline backend: plt.show() and the end of a cell).
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for n in plt.get_fignums():
        fig = plt.figure(n)
        if fig is not skip:
            _figure_result(fig, False)
    plt.close("all")


def _show(*args, **kwargs):
    _figures()


class _PyplotHook:
    # Makes matplotlib.pyplot.show() emit the figures, however the code
    # imports pyplot (there is no display: MPLBACKEND=Agg).
    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.show = _show

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PyplotHook())


_globals = {"__name__": "__main__", "__builtins__": __builtins__, "display": display}


def _run(code):
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), _globals)
        value = eval(compile(last, "<cell>", "eval"), _globals) if last is not None else None
        if _is_figure(value):
            _figures(skip=value)
            _figure_result(value, True)
            return
        _figures()
        if value is not None:
            _result(value, True)
    except BaseException as e:
        tb = traceback.format_exc()
        _emit(error={"name": type(e).__name__, "value": str(e), "traceback": tb})
        try:
            _figures()  # what the cell drew before it failed
        except Exception:
            pass


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
