compute_score = 1.0
