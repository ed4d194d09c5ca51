"""The campaign server: the one rating page of every design (`page`), its event functions
(`handlers`) and the app with its logins or crowd links (`app`)."""
