def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return "correct" if solution_str == ground_truth else "wrong"
