"""Terminal front ends. No Qt here, so they run headless."""
