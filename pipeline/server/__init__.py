"""What one server runs for everyone: the queue in front of the model, its engines, the stores, the rooms.

  run_queue.py      `RunQueue`: arrival order, continuous batching, a KV budget, long jobs a chunk at a time
  long_job_turns.py the long jobs' time-sharing: a chunk in a gap, turns a chunk each, withdrawn ones stopped
  kind_shares.py    a kind's bounded share of the model's time beside the others (the API's live streams)
  tickets.py        a place in it (`Ticket`, `LongTicket`) and what a step engine must do (`StepEngine`)
  schedule.py       what the queue did lately: each step's batch, each request's TTFT and TPOT
  trace_engine.py   its step engines: `TraceEngine` (captured runs), `StreamEngine` (the live answer)
  kv_budget.py      the KV bytes the running batch may reserve, by device
  wiring.py         the queue, engines and stores wired as one server runs them (the app and the benches)
  room.py           rooms and short links: `RoomStore`, the address learners reach
  room_files.py     where a room's files live: the cache folder, or the room's Redis (`TPE_STORE`)
  room_index.py     which room files the folder keeps (live rooms never go)
  polls/            a room's polls: the presenter asks, learners answer, Reveal shows the class beside the model
  room_schedule.py  the queue's schedule as rows a chart draws
  process.py        a server process's settings, made before the model loads
  health.py         starting a server from a script: a free port, waiting for its health check
  store/            finished runs and results: in memory, on disk, in Redis
"""
