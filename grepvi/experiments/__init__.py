"""The paper's experiments: run options, run folders, runs, studies, reports and figures."""
