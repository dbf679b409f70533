"""`gputop report FILE -o report.html`: a recording as one self-contained, offline HTML page."""
