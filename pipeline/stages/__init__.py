"""One module per stage of a request's life, named like the page that shows it."""
