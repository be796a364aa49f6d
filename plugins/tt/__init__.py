"""otpu-tt: Tenstorrent Blackhole cards (being built; see issue 7)."""
