"""trainer/sim: the event-driven cluster replay; no torch, no gymnasium."""
