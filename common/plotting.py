"""matplotlib without a display, and a figure as PNG bytes (written atomically by the caller)."""
import io


def pyplot():
    """matplotlib.pyplot on the Agg backend; imported on demand, since only reports need it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    pyplot().close(fig)
    return buf.getvalue()
