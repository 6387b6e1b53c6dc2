"""The qrsub command line and the leaderboard client."""
