"""Lessons: a file of ordered stages (a page, its request and controls as a link carries them, an optional poll) that a
presenter's room walks through, checked before the room arrives (`python -m pipeline lesson check FILE`).

  lesson.py   `read_lesson(path) -> Lesson`: the TOML file parsed and checked, a `LessonError` naming line and field
  fields.py   what each field may hold: the pages, the request's link names, the poll kinds
  lines.py    the line of a table or key in the file's text (tomllib gives none for a value)
"""
