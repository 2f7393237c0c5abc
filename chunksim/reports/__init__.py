"""Everything that draws or formats for people: console tables, figures, reports.
matplotlib is imported lazily inside functions (see `style.pyplot`)."""
