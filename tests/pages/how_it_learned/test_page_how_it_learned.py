"""The How it learned page in AppTest, on the tiny random-weight model (fixture `tiny_app`, fast tier)."""


def test_the_shift_by_one_table_shows_the_end_of_what_the_model_read(tiny_app):
    from kit.apptest import page_app

    at = page_app("how_it_learned")
    at.run()
    READ_CHARS = 36  # views/pages/how_it_learned/page.py's (importing a page module runs the page)
    at.text_area(key="learn_text").set_value("The contract between the two parties lasts three years and a day.")
    [b for b in at.button if b.label == "Score it"][0].click().run()
    assert not at.exception, [e.message for e in at.exception]
    [table] = [d.value for d in at.dataframe if "the model read" in d.value.columns]
    read, guess = list(table["the model read"]), list(table["to guess"])
    assert max(len(r) for r in read) <= READ_CHARS and read[-1].startswith("…")
    assert (read[-2] + guess[-2]).endswith(read[-1][-10:])  # each row ends right where the row before it guessed
