def score_copy(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str == ground_truth)
