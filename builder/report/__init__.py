"""The build's report: build-report.json, one typed record (build_report.py), made from the
attempts (attempt_records.py), and its picture build-report.html (page.py, with chart.py,
wheel_evidence.py and values.py, which bounds every number and text a page shows)."""
