"""HTML templates and static assets of the leaderboard site (package data)."""
