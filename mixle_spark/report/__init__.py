"""Fit reports: one self-contained HTML page describing a fitted model (:func:`write_report`,
:func:`report_html`).

The page (``_page``) has an overview, the segment profiles, fields ranked by how much they separate
the segments (``_segments``, :mod:`mixle_spark.report.separation`), the log-likelihood per
iteration, the component weights, every field's parameters per component (:mod:`mixle_spark.report.
parameters`) and a 2-D projection of a sample (``_projection``); ``_html`` holds the HTML pieces and
``_figures`` the matplotlib and SVG figures.
"""

from mixle_spark.report._html import PLOT_HINT
from mixle_spark.report._page import GENERATOR as GENERATOR
from mixle_spark.report._page import SECTIONS, report_html, write_report
from mixle_spark.report.parameters import describe_parameters

__all__ = ["PLOT_HINT", "SECTIONS", "describe_parameters", "report_html", "write_report"]
