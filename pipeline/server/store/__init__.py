"""Finished work kept: in memory first, behind it on disk or in the room's Redis.

  memory.py         `RunStore`: runs in memory, bounded in bytes, one computation per key
  shared.py         which store is behind memory (`TPE_STORE`): `SharedStore`
  disk.py           `DiskStore`: one file per run, atomic rename, LRU in bytes, shared by a host's replicas
  redis_store.py    `RedisStore`: the same for replicas on several machines
  redis_rooms.py    rooms, short links and polls in the room's Redis, for the replicas of several hosts
  verdict_file.py   the speed verdicts shown, in one JSON file every server sharing the folder reads
  moved_classes.py  runs pickled before the December 2026 relayout still load
"""
