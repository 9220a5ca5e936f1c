"""What the specs feed the engines: Hypothesis strategies, scripted schedules, kernel targets, a tree of recipes."""
