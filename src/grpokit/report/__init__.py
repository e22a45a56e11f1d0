"""What people look at: the run page, the comparison of runs, the plots."""
