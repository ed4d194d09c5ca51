"""A campaign's data, below everything else in `webapp.campaign` (it knows no design): conditions and
settings (`conditions`), the campaign folder (`definition`), the one SQLite store of every design
(`store`), rater logins (`raters`) and crowd participants' signed links (`crowd`)."""
