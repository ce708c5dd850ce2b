"""What every floor above uses, written once; no torch.

  errors.py     `InputError`: the one error type for bad input, naming the field
  checks.py     checks at the door of a public function (numbers, arrays, text)
  maths.py      the few numeric helpers several stages share (the one softmax)
  files.py      atomic writes, and the checks on files a user names
  timing.py     honest timing comparisons: interleaved, repeated, medians and ranges
  long_jobs.py  long work as a generator of short chunks the queue runs between questions
  common_prefix.py  how long a start two sequences share (`common_prefix_len`), where they part (`first_difference`)
  poll_kinds.py  the kinds of a room's poll, their names and titles (the polls and the lesson files)
"""
