"""matplotlib in the notebooks: sharp PNG figures with readable text, stored in the notebook.

Public API: ``plots()`` (call once per notebook), ``FIGURE_STYLE``.
"""

from __future__ import annotations

from typing import Any

FIGURE_STYLE: dict[str, Any] = {
    "figure.dpi": 100,  # 1 inch of figure = 100 CSS pixels in the notebook
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "text.antialiased": True,
    "lines.antialiased": True,
    "patch.antialiased": True,
    "savefig.bbox": "tight",
}


def plots() -> None:
    """Figures as sharp PNGs with readable text, stored in the notebook.

    Why PNG and not SVG: JupyterLab renders SVG (and HTML with SVG inside) only in notebooks the reader
    has *trusted*, and a fresh clone is not trusted, so stored SVG figures showed up as
    ``<Figure size ...>``. PNG is shown everywhere. "retina" draws at twice the pixel density and tells
    the browser the logical size, so text stays sharp on high-resolution screens.
    """
    import matplotlib as mpl

    mpl.rcParams.update(FIGURE_STYLE)
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside IPython there is nothing to configure
        return
    shell = get_ipython()
    if shell is None:
        return
    set_matplotlib_formats("retina")
    png = shell.display_formatter.formatters["image/png"]
    retina = png.lookup_by_type(Figure)
    png.for_type(Figure, lambda fig: _compact(retina(fig)))


def _compact(shown: Any) -> Any:
    """IPython's retina PNG (bytes or base64 text, alone or with size metadata), with a 256-colour palette."""
    import base64

    from .raster import compact_png

    data, meta = shown if isinstance(shown, tuple) else (shown, None)
    if isinstance(data, str):
        data = base64.b64encode(compact_png(base64.b64decode(data))).decode("ascii")
    elif isinstance(data, bytes):
        data = compact_png(data)
    return data if meta is None else (data, meta)
