"""Privacy mathematics: DP-SGD training and accounting, membership-inference scores, audit statistics."""
