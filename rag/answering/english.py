"""The English the answer flow reads: every heuristic on words, as regexes and word lists, in one place.

What a question asks for (``QuestionShape`` is read from these once per question), where a short answer may start
and end, what a sentence says of itself, how a follow-up leans on the conversation, how a model declines. The
question patterns take the other languages' alternatives from rag/core/languages.toml ("Wie kann ich …?",
"¿Cómo …?", "Combien …?"); the rest is English only.
"""

from __future__ import annotations

import re

from rag.core.text import LANGUAGE_RULES, MONTHS


# What may stand before a question's opener: what the asker says first ("pg_hba.conf says md5. Will the login still
# work?", "A dpkg -i failed half-way; how do I …?"), then one or two leading clauses or phrases, each ended by a comma
# or a colon ("If I track sid, do I …?", "By default, does rsync …?", "Now about USB sticks: where …?"); not a clause
# that itself opens with a question word, in any language ("How many problems, formerly believed …, did Karp's paper
# address?" asks a number; "Wie ändere ich, wie lange …?" a way).
# "When" asks a time where a verb of asking follows it ("When did …", "When is …", "When?"); before a clause of
# its own it opens a leading clause ("When I do in-place substitutions with perl, which argument …?", "When no WAL
# is available …, how long …?"): those were read as time questions and answered "After your practice".
WHEN_ASKED = (r"when(?=\s+(?:am|is|are|was|were|do|does|did|will|would|can|could|shall|should|may|might|must|has|"
              r"have|had|and|or)\b|\s*[?.]?\s*$)")
OPENER_PATTERNS = [rf"(?:how|what|which|who|whom|whose|where|{WHEN_ASKED}|why)\b",
                   *(pattern for rules in LANGUAGE_RULES.values()
                     for key, pattern in rules.get("questions", {}).items() if key != "technical_nouns")]
# Nor one that opens with a preposition and a question word: "In what order of precedence, highest first, does git
# consult …?" asks an order, not Yes or No (sixth unseen set).
OPENER_AFTER_PREPOSITION = r"(?:(?:in|on|at|from|for|by|with|to|into|under|after|before|during|since|until)\s+)?"
# A clause may be long: "If the same option appears in my ~/.aptitude/config and also in the system-wide
# /etc/apt/apt.conf, does my own file's value win?" (101 characters; at most 80 read it as asking for a path). Of the
# 2,856 questions of every set only that one changed shape at 120.
# A conjunction may join the question to them: "A random read costs far more than four sequential ones, so why is
# random_page_cost only 4.0?", "…, but how do I …?", "And which one do I get when …?" (read as no question at all).
LEADING_CLAUSES = (r"(?:[^?]*?[.!;]\s+)?(?:(?!" + OPENER_AFTER_PREPOSITION + "(?:" + "|".join(OPENER_PATTERNS) +
                   r"))[^,:;?]{1,120}[,:]\s+){0,2}?"
                   r"(?:(?:and|but|so|yet|then|or)\s+)?")


# "What's", "Where's": the opener and its verb, read as written out.
CONTRACTED_IS = re.compile(r"(?i)\b(what|where|who|how|when|which|that|there)['’]s\b")


def asked(english: str, key: str) -> re.Pattern[str]:
    """A question opener: the English alternatives, then every other language's (its ``questions.key``), matched
    case-insensitively at the question's start or after its leading clauses, after an opening "¿" or "¡"."""
    others = [rules["questions"][key] for rules in LANGUAGE_RULES.values() if key in rules.get("questions", {})]
    return re.compile(r"(?i)^\s*" + LEADING_CLAUSES + r"[¿¡]?\s*(?:" + "|".join([english, *others]) + ")")


# ------------------------------------------------------------------ questions: what is asked for
# "When …", "What year …", "How many …": questions whose answer starts with a number, a date or a month.
NUMERIC_QUESTION = asked(
    rf"{WHEN_ASKED}|(?:in |by |since )?(?:what|which) (?:year|decade|century|date|month|percentage|percent|age)|"
    r"how (?:many|much|long|old|large|big|far|tall|high)|"
    # A threshold: "Above which Pin-Priority will APT downgrade a package?", "Below what amplification factor …?"
    r"(?:above|below|beyond) (?:what|which)\b|"
    r"what (?:is|was|are|were) (?:the )?(?:[\w'’-]+ ){0,3}?(?:population|area|height|length|cost|price|budget|"
    r"rate|limit|allowance|fee|amount|size|salary|total|maximum|minimum|number)s?\b|"
    # The quantity before its verb: "What cost does the planner assume …?", "Which exit code does pg_isready hand
    # back …?", "…, what estimated query cost has to be exceeded …?" (answered with the setting's name).
    r"(?:what|which) (?:[\w'’-]+ ){0,2}?(?:cost|price|fee|port|percentage|number|exit code|exit status|timeout)s? "
    r"(?:does|do|did|is|are|was|were|has|have|had|must|should|will|would|can|could|may)\b", "numeric")
TIME_QUESTION = asked(rf"(?:{WHEN_ASKED}|(?:in |by |since )?(?:what|which) (?:year|decade|century|date|month))\b",
                      "time")
PERSON_QUESTION = asked(r"(?:who|whom|whose)\b", "person")
PLACE_QUESTION = asked(r"where\b", "place")
# Questions asking for an explanation get the evidence sentences themselves, each cited, not a phrase.
EXPLANATORY_QUESTION = asked(
    r"explain|describe|summari[sz]e|outline|discuss|tell me about|give an overview|"
    r"why\b|how (?:does|do|did|is|are|was|were|can|could)\b|what (?:is|are) the (?:difference|reason|purpose)s?\b|"
    r"what (?:is|was) the point of\b|what (?:is|are) (?:an? |the )?[^?]{1,40}? good for\b", "why")
# "Is alcohol reimbursed?", "Can I run pg_dump on a live database?": answered "Yes" or "No", with the quote that
# decides it; not "Is it A or B?", which asks for a choice: one or two words after its "or", outside a condition
# ("Is a problem instance typically characterized as abstract or concrete?"). An "or" elsewhere joins examples or
# subjects ("Can I switch flags such as monitor or stats on and off remotely …?", "Does the logging collector,
# rotatelogs or syslog-based rotation delete old log files?", "… if I never define any storage pools or volumes?").
CHOICE = r"(?!(?:(?!\b(?:if|when|unless)\b).)*\bor\s+[\w'’-]+(?:\s+[\w'’-]+)?\s*\??\s*$)"
YES_NO_QUESTION = asked(
    r"(?:is|are|was|were|am|do|does|did|can|could|may|might|must|shall|should|will|would|has|have|had|"
    rf"isn't|aren't|doesn't|don't|can't)\b{CHOICE}", "yes_no")
# "How do I purge removed packages' configuration?", "Which command lists …?": answered with the command, option,
# path or configuration line the documentation shows, verbatim.
HOWTO_QUESTION = asked(
    r"how (?:do|can|could|should|would|might|may|must) (?:i|you|we|one)\b|how to\b|"
    r"what (?:is|are) the (?:[\w-]+ )?commands?\b|"
    r"(?:what|which) (?:[\w.-]+ )?(?:(?:meta-)?commands?|options?|lines?|settings?|parameters?|directives?|flags?|"
    r"switch(?:es)?|variables?)\b|"
    # "APT keeps giving GPG error BADSIG; what should I do?": the remedy for a problem, a command the documentation
    # shows (not "What should I do to …?", which asks for its steps: ``STEPS_QUESTION``).
    r"what (?:should|must|can|do) (?:i|you|we|one) (?:do\s*\?|run\b|type\b|enter\b)",
    "howto")
# "How do I restore a plain-text dump?": a procedure is asked for, the command line a sentence announces ("The
# general command form … is") rather than an option or a setting ("Which createuser option …?").
PROCEDURE_QUESTION = asked(r"how (?:do|can|could|should|would|might|may|must) (?:i|you|we|one)\b|how to\b|"
                           r"what (?:is|are) the (?:[\w-]+ )?commands?\b", "procedure")
# "Which command shows the UUID of a block device?", "Which package provides lpr?": a program is asked for, and a
# path, an option or a URL (``NOT_A_PROGRAM``) is none; its manual page names one ("blkid(8)").
# "Is there a tool that refreshes my package lists on a schedule?": the tool is asked for, as by "Which tool …?".
EXISTENTIAL_QUESTION = asked(r"(?:is|are) there (?:an?|any|some) (?=(?:[\w.-]+ ){0,2}?(?:tools?|commands?|programs?|"
                             r"utilit(?:y|ies)|packages?|options?|flags?|switch(?:es)?|settings?|parameters?|"
                             r"directives?|variables?|files?)\b)", "existential")
COMMAND_QUESTION = asked(r"(?:what|which) (?:[\w.-]+ )?(?:commands?|tools?|programs?|utilit(?:y|ies)|packages?|"
                         r"daemons?)\b", "command")
NOT_A_PROGRAM = re.compile(r"^[\"'“‘(]*(?:~?/|-{1,2}\w|[a-z][a-z0-9+.-]*://)")
# A path: "/etc/postfix/main.cf", "~/.psqlrc" (quoted or bracketed too).
PATH_START = re.compile(r"^[\"'“‘(]*~?/[\w.]")
MAN_PAGE = re.compile(r"[\w.+-]+\(\d\w*\)")
# "Which file decides …?", "Which directory holds …?": a file or a directory is asked for (a path, a file name).
FILE_QUESTION = asked(r"(?:(?:in|from|to|into) )?(?:what|which) (?:[\w.-]+ ){0,2}?"
                      r"(?:files?|director(?:y|ies)|folders?|paths?)\b", "file")
# A path ("/var/log/journal", "~/.psqlrc") or a file name ("postgresql.auto.conf", "standby.signal"; not "e.g.", not
# a function called, "str.join(").
FILE_NAME = re.compile(r"(?<![\w/])[/~][\w.~*-]+(?:/[\w.~*-]*)*|\b[A-Za-z][\w-]+(?:\.[\w-]+)*\.[a-z]{1,8}\b(?!\()")
# "less than 2%", "at least 8 characters", "about 10 days": a bound or an approximation before a number belongs to the
# answer ("2%" alone says another thing).
BOUND_BEFORE = re.compile(r"(?i)\b(?:(?:less|more|fewer|greater|higher|lower|longer|shorter|older|younger) than|"
                          r"at (?:least|most)|up to|about|approximately|around|nearly|almost|roughly|over|under)\s+$")
# "Which createuser option …?", "Which setting must be on …?": a name the documentation writes as code is asked
# for (``OPTION_WORD``). Not "variable": SQuAD's "What variable is associated with …?" is answered "L".
OPTION_QUESTION = asked(r"(?:what|which) (?:[\w.'/-]+ ){0,3}?(?:options?|settings?|parameters?|directives?|flags?|"
                        r"switch(?:es)?|meta-commands?)\b", "option")
# "Which signal do I send virtlogd so that it re-executes itself?": a signal's name is the answer ("SIGUSR1", "HUP";
# ``SIGNAL_NAME``), and a sentence naming none does not answer it ("QEMU" was the answer, seventh unseen set).
SIGNAL_QUESTION = asked(r"(?:(?:with|by) )?(?:what|which) (?:[\w.'/-]+ ){0,3}?signals?\b", "signal")
# A POSIX signal's name as manuals write it, with or without "SIG" ("SIGHUP", "HUP", "USR1"), in capitals.
SIGNAL_NAME = (r"(?:SIG)?(?:HUP|INT|QUIT|ABRT|KILL|SEGV|PIPE|ALRM|TERM|USR1|USR2|CHLD|CONT|STOP|TSTP|TTIN|TTOU|"
               r"WINCH|PWR)\b")
SIGNAL = re.compile(rf"(?<![\w-]){SIGNAL_NAME}")
# A word written as code: an option ("-k", "--pwprompt"), key=value, snake_case, CamelCase ("PubkeyAuthentication",
# not "PostgreSQL"), a long capitalised name ("PGDATA"), a meta-command ("\timing"), a variable ("$LANG"), "A::B".
OPTION_WORD = re.compile(rf"^[\"'“‘(]*(?:--?[A-Za-z]|[\\$][A-Za-z{{]|{SIGNAL_NAME})|\w=\S|[A-Za-z0-9]_[A-Za-z0-9]|"
                         r"[A-Z][a-z]+[A-Z][a-z]|^[\"'“‘(]*[A-Z][A-Z0-9]{3,}\b|\w::\w")
# A word the sentence names as one: "the relayhost parameter", "the option noatime" (postfix's and mount's settings
# are plain words).
NAMED_AS_OPTION = re.compile(r"(?i)\b([\w.-]+)\s+(?:parameters?|options?|settings?|directives?|flags?|switch(?:es)?|"
                             r"variables?)\b|\b(?:parameters?|options?|settings?|directives?|flags?|variables?)\s+"
                             r"([\w.-]+)")
# "Which environment variable overrides the proxy …?": a variable is asked for, named as one ("$http_proxy",
# "GRUB_BACKGROUND", "the environment variable PGDATA"), not a path nor a shell line.
VARIABLE_QUESTION = asked(r"(?:what|which) (?:[\w.-]+ )?variables?\b", "variable")
# A family of variables is one name: "$LC_*" (was answered "$LC_").
# A capitalised name before the word ("the PAPERSIZE environment variable") is one too.
VARIABLE_NAME = re.compile(r"\$\{?[A-Za-z_]\w*\*?\}?|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
                           r"|(?<=variable )[A-Z][A-Z0-9_]{2,}\b"
                           r"|\b[A-Z][A-Z0-9_]{2,}(?= (?:environment |shell )?variable\b)")
VARIABLE_TOKEN = re.compile(r"\$?\{?[A-Za-z_]\w*\*?\}?")  # what may be one, on its own
# "Which directories get cleaned at boot?", "What risks do I take …?": the answer names every item. Not where the
# plural is a verb: "Which kernel parameter gets me …?", "Which file decides whether …?", "Which timeit option sets
# how many times …?".
LIST_QUESTION = re.compile(r"(?i)^\s*" + LEADING_CLAUSES + r"(?:(?:in|on|from|for|with|at|by|into|under)\s+)?"
                           r"(?:which|what)\s+(?:[\w-]+\s+){0,2}?(?P<noun>[a-z][\w-]*[^s\W]s)\b"
                           r"(?!\s+(?:the|a|an|my|your|its|their|this|that|these|those|"
                           r"me|us|you|him|her|it|them|which|what|whether|how|where|who)\b)"
                           # a plural before the verb of another subject ("Which environment variables does vacuumdb
                           # read …?", "On which operating systems is peer authentication available?"), not a
                           # singular noun in -us or -is ("What status does it return?")
                           r"(?<!us)(?<!is)")
NOT_PLURALS = frozenset("does has was is this its yes us thus".split())
# "What should I do to …?": answered with the steps the documentation lists.
STEPS_QUESTION = re.compile(r"(?i)^\s*what (?:should|must|do|can|could) (?:i|we|you|one) do\b")
# "Who was Rollo?", "What is photosynthesis?": a definition is a sentence, not a phrase.
DEFINITION_QUESTION = re.compile(r"(?i)^\s*(?:who|what|where) (?:is|was|are|were) (?:an? |the )?([^?]+?)\s*\?*\s*$")
# "What is the default X?", "What is the maximum Y?": a value is asked for, not a definition.
VALUE_WORDS = frozenset("default value name maximum minimum max min size number port path location version limit "
                        "setting".split())

# "Which file …?", "Which option …?": what is asked for is named in the documentation by a technical token.
TECHNICAL_NOUNS = frozenset("file files command commands option options setting settings variable variables directory "
                            "directories folder tool tools program programs package packages parameter parameters path "
                            "url target extension view directive key unit units template module signal utility script "
                            "function daemon service flag argument field".split()) | frozenset(
    noun for rules in LANGUAGE_RULES.values() for noun in rules.get("questions", {}).get("technical_nouns", "").split())
# A technical token in a phrase: a path, an option, key=value, a dotted or snake_case name, a man page, "::".
# A quoted lowercase name with a hyphen is one too: a make target or a package ('the "deb-pkg" target').
TECHNICAL_TOKEN = re.compile(r"[\w~$.*-][/=][\w~$.*-]|\w\.\w|\w_\w|::|(?:^|\s)--?\w|\w\(\d\w*\)|(?:^|\s)[/~$]\w"
                             r"|[\"“][a-z][a-z0-9.+]*(?:-[a-z0-9.+]+)+[\"”]")

# ------------------------------------------------------------------ answers: where a short answer starts and ends
# A protocol's version starts a number too: "TLSv1.2" for "What is the default minimum TLS version?" (not "IPv6").
NUMERIC_START = re.compile(
    r"(?i)^(?:[£$€¥]?\d|(?-i:[A-Z]{2,}v\d+\.\d)|(?:january|february|march|april|may|june|july|august|september|"
    r"october|november|december|"
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|sixty|seventy|"
    r"eighty|ninety|hundred|thousand|million|billion|several|over|about|around|more|less|nearly|approximately)\b)")
YEAR_OR_MONTH = re.compile(r"(?i)^(?:1\d{3}|20\d{2})s?\b|^(?:january|february|march|april|may|june|july|august|"
                           r"september|october|november|december)\b")
# A time said without a number also answers "when": "every Tuesday at noon", "in spring", "each morning".
TIME_WORD = re.compile(
    r"(?i)^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekdays?|weekends?|noon|midday|midnight|"
    r"dawn|dusk|sunrise|sunset|mornings?|afternoons?|evenings?|nights?|spring|summer|autumn|fall|winter|every|"
    r"each|daily|weekly|monthly|yearly|annually|today|tomorrow|yesterday|tonight)\b")
# A "when" answered by an event rather than a date: "after completing their probation", "on the end date of the
# contract", "at boot". "on" and "at" count only before a word of time within three words.
TEMPORAL_PREPOSITIONS = frozenset("after before until during within upon once whenever".split())
TIMED_PHRASE = re.compile(r"(?i)^(?:on|at)\s+(?:\S+\s+){0,2}?(?:date|day|end|beginning|boot|startup|shutdown|login|"
                          r"logon|installation|upgrade|reboot|restart)\b")
ARTICLES = frozenset({"the", "a", "an"})
# Words that open a clause, never an answer ("Although time and space are…", "Historically, Victoria…").
CLAUSE_OPENERS = frozenset("although while however historically since because though after before during whereas "
                           "thus therefore also then yet still subsequently similarly if unless whether once until "
                           "otherwise".split())
# A question asks for a default ("What is the default wal_level?", "… by default?"), and a sentence states one just
# before the answer: "The default value is replica", "The default is TLSv1.2", "Defaults to … 60 seconds".
# Asked in other words too: "Out of the box, …?", "Unless I change it, …?", "… if jit_provider is left alone?", "On a
# freshly installed server where nobody has touched search_path, …?", "If I don't pass a timeout, how long …?".
ASKS_DEFAULT = re.compile(r"(?i)\b(?:default|out of the box|unless (?:i|you|we) change it|"
                          r"left (?:alone|untouched|unset)|(?:nobody|no one) has (?:touched|changed|set)|"
                          r"fresh(?:ly)? install(?:ed|ation)?|compiled-in|"
                          r"if (?:i|you|we) (?:don't|do not|never) (?:set|change|pass|give|specify))\b")
_DEFAULT_IS = r"default(?:\s+(?:value|setting))?\s+(?:is|was)"
STATES_DEFAULT = re.compile(rf"(?i)\b(?:{_DEFAULT_IS}(?:\s+(?:normally|usually))?|defaults\s+to)\s+$")
# A sentence that states a default anywhere in it: "The default is to log to stderr only.", "trust is the default for
# ease of installation.", "Defaults to 60 seconds.", "5432 by default.", "Output a plain-text SQL script file (the
# default)." (the sentence ranker's ``default_stated``).
STATES_A_DEFAULT = re.compile(rf"(?i)(?:\b(?:{_DEFAULT_IS}|defaults\s+to|(?:is|are)\s+the\s+default|by\s+default)|"
                              r"\((?:the\s+)?default)\b")
# Items joined in one phrase, which a list question's answer weighs (``SpanWeights.listed``): "Bacula, Amanda, and
# BackupPC", "Linux and macOS".
COORDINATION = re.compile(r"\w,\s+\S|\w\s+(?:and|or)\s+\S")
# What a sentence says not to run: the quoted command after "instead of" or "rather than" ('use "sudo -H aptitude …"
# instead of "sudo aptitude …"').
REPLACED = re.compile(r"(?i)\b(?:instead of|rather than)\s*$")
# Adverbs that say how or where a sentence's own answer applies, never an answer themselves ("Under systemd, use
# systemd-timesyncd … instead." was answered "instead"). Not the ones that modify what follows: "rather concrete"
# answers "Is a problem instance abstract or concrete?" (squad2-dev), "just 3 days", "too large".
LONE_ADVERBS = frozenset("instead here again already else".split())
# A lowercase word after one of these is a verb ("will default to a fully qualified domain name"), never an answer.
MODAL_VERBS = frozenset("will would can could may might must shall should".split())
PLACE_PREPOSITIONS = frozenset({"in", "at", "near", "from", "on", "into", "to"})
# Words an answer never ends on: it would leave its clause unfinished ("each file that a user", "If the Web
# can", "you can", "more"); besides the stop words and prepositions.
DANGLING_WORDS = frozenset(
    "a an the of to in on at for with by from into onto via per and or nor but that which who whom whose if when "
    "whether because while although unless until than as so can could may might must shall should will would is "
    "are was were be been being has have had do does did you we they he she it i more less most each every such "
    "not no".split())
# Words an answer never ends on ("The cities and communities along"), besides the stop words.
PREPOSITIONS = frozenset("along across through between within without toward towards via under over among upon "
                         "onto beside besides despite per about against beyond like than".split())
ARTICLE_NEXT = re.compile(r"(?i)\s+(?:the|a|an)\s")
# A number is not said without its magnitude or unit of time ("12" of "12 million", "9th" of "9th century").
MAGNITUDE_NEXT = re.compile(r"(?i)\s+(?:million|billion|trillion|thousand|hundred|centur(?:y|ies)|percent|per cent)\b")
# Nor a count without its unit: "7" of "(default 7 days)", "512" of "512 bytes".
UNIT_NEXT = re.compile(r"(?i)\s+(?:(?:milli|micro|nano)?seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|"
                       r"months?|years?|(?:kilo|mega|giga|tera)?bytes?|bits?|[KMGT]i?B|characters?|percent)\b")
MONTH = re.compile(r"(?i)^(?:january|february|march|april|may|june|july|august|september|october|november|"
                   rf"december|{'|'.join(map(re.escape, MONTHS))})$")
# Nor a day without the month its ordinal dot runs into ("31" of "bis zum 31. März"; months of
# rag/core/languages.toml).
ORDINAL_DATE_NEXT = re.compile(rf"\.\s+(?:{'|'.join(map(re.escape, MONTHS))})\b")
# Words that open a subordinate clause inside an answer: the answer must then run to the clause's end.
CLAUSE_INSIDE = re.compile(r"(?i)\s(?:that|which|who|whom|whose|if|when|whether|because|where|while|although|unless)\s")
CLAUSE_END = re.compile(r"\s*(?:$|[,.;:!?)\]])")

# ------------------------------------------------------------------ sentences: what one says of itself
# Words that turn a sentence's statement into its negation ("Alcohol is never reimbursed.").
NEGATION = re.compile(r"(?i)\b(?:not|never|no|none|cannot|neither|nor|without|forbidden|prohibited)\b|n['’]t\b")
# A negation that says "by default" negates nothing asked: "… without me configuring anything?", "… if I don't say
# otherwise?", "… works out of the box and does not require additional configuration." (sixth unseen set and the
# third: answered No where the page says Yes).
BY_DEFAULT_NEGATION = re.compile(
    r"(?i)\bwithout (?:me|you|us|one|anyone|having to) \w+ing\b(?: (?:any|anything|extra|additional|further|more)\b)?"
    r"|\bwithout (?:any )?(?:extra |additional |further )?(?:configuration|configuring|setup|set-up)\b"
    r"|\b(?:if|unless) (?:i|you|we|one) (?:do not|don['’]t|say|says) (?:say )?otherwise\b"
    r"|\b(?:does|do|did) not (?:need|require) (?:any )?(?:extra |additional |further )?"
    r"(?:configuration|configuring|setup|set-up)\b"
    r"|\bno (?:extra |additional |further )?(?:configuration|setup|set-up) (?:is )?(?:needed|required)\b")


# A reason given before the statement is not what it states: "Since no additional files are used for metadata …
# and Maildir is locking-free, it's easy to sync across different machines …" answers "Can I keep Maildir folders
# in step across two machines …?" Yes (eighth unseen set: No).
LEADING_REASON = re.compile(r"(?i)^\s*(?:since|because|given that|now that|seeing that)\s[^,;:]{1,200},\s+(?=\S)")


def negates(text: str) -> bool:
    """``text`` (a question, an evidence sentence) says no to something: a negation word that does not merely say
    "by default" (``BY_DEFAULT_NEGATION``), outside a reason given before the statement (``LEADING_REASON``)."""
    return bool(NEGATION.search(BY_DEFAULT_NEGATION.sub("", LEADING_REASON.sub("", text))))

# A negation of a harm says the good thing: "pg_dump does not block other operations" answers "Can other sessions
# keep writing …?" Yes, "duplicate messages do not necessarily indicate a problem" answers "Is it normal …?" Yes;
# unless the question asks about that harm itself ("Does pg_dump block writers?": No).
HARMS = r"block|blocks|prevent|prevents|interfere|interferes|harm|harms|hurt|hurts|break|breaks|disrupt|disrupts|" \
        r"problem|problems|conflict|conflicts"
NEGATED_HARM = re.compile(r"(?i)(?:\b(?:not|never|cannot)|n['’]t)\s+(?:\w+\s+){0,3}?(" + HARMS + r")\b")
# Words of opposite meaning: a yes/no question asking "different" of a sentence saying "the same" is answered the
# other way from what the sentence's own polarity says ("Are runlevels 2, 3 and 4 different targets?" — "…all
# symlinked to the same "multi-user.target"." — No).
OPPOSITES = tuple((re.compile(rf"(?i)\b(?:{a})\b"), re.compile(rf"(?i)\b(?:{b})\b")) for a, b in (
    ("same|identical", "different|distinct"),
    ("safe|safer|safest|safely", "risky|riskier|riskiest|dangerous|unsafe"),
    ("enabled?", "disabled?"),
    ("allowed|permitted", "forbidden|prohibited|disallowed"),
    ("faster|quicker", "slower"),
    ("larger|bigger|more", "smaller|fewer|less"),
    ("required|mandatory", "optional"),
))
# A message the question quotes, three words or more: 'could not create semaphores: No space left on device' (a
# single quote after a letter is an apostrophe: "user's").
QUOTED_MESSAGE = re.compile(r"""(?<!\w)['"“‘]([^'"”’]*\w[^'"”’\s]*\s+\S+\s+[^'"”’]*)['"”’](?!\w)""")
# A sentence that leans on the one before it: "This will make restoration very slow.", "Such a symlink may be
# overwritten …", "For these reasons NULL ciphers are not recommended.", "It is done primarily for efficiency: …".
LEANS_ON_BEFORE = re.compile(r"^(?:This|That|These|Those|Such|Doing so|It|However|Otherwise|Therefore|Thus|Hence|"
                             r"As a result|For (?:this|that|these|those) reasons?|In (?:this|that) case)\b")
# A sentence that goes on about what the one before it named: "If you include the -X parameter when calling it, …".
GOES_ON_ABOUT = re.compile(r"(?i)\b(?:it|them)\b")
# A sentence that adds a point to the one before it: for a why question, that one is a reason too ("Furthermore,
# SIGKILL kills …" after "Doing so will prevent the server from releasing shared memory …").
ADDS_TO_BEFORE = re.compile(r"^(?:Also|Furthermore|Moreover|In addition|Besides)\b")
# A sentence that says it runs or shows a command: a quoted run of lowercase words in it is one ("aptitude
# unmarkauto vim"), not prose.
RUNS_A_COMMAND = re.compile(r"(?i)\b(?:use|using|used|run|running|execute|type|invoke|command|enter|start|call|apply)\b")
# A sentence that announces the code under it ("…with the following command.", "…as follows:", "The general command
# form to restore a text dump is", "The following reconfigure the timezone …", "…, the following should be the safe
# considerations.").
INTRODUCES = re.compile(r"(?i)(?:\bfollowing(?:\s+[\w-]+){0,2}|\bas follows\b|\bbelow\b|\bas:?|\bis|:)\s*\.?\s*$"
                        r"|\bthe following (?:are|is|should be|must be|can be|may be)(?:\s+[\w-]+){0,3}\s*[.:]?\s*$"
                        r"|^the\s+following\b"
                        # "…, you can run the command" above the command itself (the Debian FAQ's pages), unpunctuated
                        r"|\b(?:run|execute|type|enter|issue)\s+(?:the\s+|this\s+)?commands?\s*$"
                        r"|\b(?:use|using|with)\s+(?:the|this)\s+commands?\s*$")
# A sentence that announces a command in so many words ("…, you can run the command", "If you want to change it,
# run:", "…with the following command."): the line under it is one even without an option ("systemctl disable
# service.service").
# ("type" or "enter" only with "command": "… of the following type:" announces no command).
ANNOUNCES_A_COMMAND = re.compile(r"(?i)(?:\b(?:run|execute|issue)(?:\s+(?:the|this|following))*(?:\s+commands?)?"
                                 r"|\b(?:type|enter)(?:\s+(?:the|this|following))*\s+commands?"
                                 r"|\bcommands?(?:\s+line)?)\s*[.:]?\s*$")
# A sentence about the code line right above it: "This filter will match when the message contains …" under
# ':msg, contains, "ID-4711"'.
ABOUT_THE_CODE_ABOVE = re.compile(r"^(?:This|These|The above|The example above)(?:\s+[\w-]+){0,2}?\s+(?:will|would|"
                                  r"does|do|matches|match|makes|tells|causes|sets|means|selects|enables|disables|"
                                  r"filters|writes|sends|logs|configures)\b")
# A sentence that announces, in words, a list under it ("LVM requires the following.", "… are as follows:").
ANNOUNCES_A_LIST = re.compile(r"(?i)\b(?:following|as follows)(?:\s+[\w-]+){0,4}\s*[.:]?\s*$")


def defines(subject: str, sentence: str) -> bool:
    """The sentence says what ``subject`` is: "Victoria (abbreviated as Vic) is a state…", "Rollo, a Viking
    leader…", "…the famed Viking ruler Rollo" (not "Before Rollo's arrival…")."""
    name = re.escape(subject)
    return bool(re.match(rf"(?i:(?:the |an? )?{name})(?:\s*\([^)]*\))?,?\s+(?:is|was|are|were)\s+(?:a|an|the|one)\b", sentence)
                or re.search(rf"(?i:\b{name}),\s+(?:a|an|the)\s", sentence)
                or re.search(rf"\b[a-z]+(?:er|or|ist|ian|ent|ant)\s+(?i:{name})\b(?!['’])", sentence))


# ------------------------------------------------------------------ conversation: a follow-up and what it leans on
# A question that leans on the conversation: a pronoun or a demonstrative standing for something named
# earlier, "there" at the end, or an opening "and / what about"; very short questions ("And in 1900?") too.
REFERS_BACK = re.compile(
    r"(?i)\b(?:it|its|they|them|their|theirs|he|him|his|she|her|hers|this|these|those|the same|former|latter)\b|"
    r"\b(?:in|from|to|at|near) there\b|^\s*(?:and|but|also|so|what about|how about)\b|"
    # "that" standing for something said before: "What does that do …?", "in that recording", "that one"; not a
    # relative or a conjunction ("the file that sets …", "Is it true that …?").
    r"\b(?:do|does|is|was|about|after|before|for|from|in|into|of|on|than|to|with|without) that\b|"
    r"\bthat (?:one|ones)\b(?!\s+(?:should|must|can|could|would|will|may|might|is|was|does|did|has)\b)")
# "it" standing for nothing: "How long does it take …?", "Is it possible to …?", "it is …".
EXPLETIVE_IT = re.compile(r"(?i)\b(?:does|did|will|would|can|could|should)\s+it\s+(?:take|takes|took|cost|costs|mean|matter)\b|"
                          r"\bis\s+it\s+(?:possible|necessary|true|safe|ok|okay|allowed|better|worth|wise|a good idea)\b|"
                          r"\bit\s+(?:is|was)\s+(?:possible|necessary|true)\b")
# "And in Berlin?", "What about contractors?": a question that only names what changes.
ELLIPTICAL = re.compile(
    r"(?i)^\s*(?:and|but|what about|how about)\s+(?:(in|for|at|on|with|of|from|to|during|by|under)\s+)?"
    r"(?!(?:what|when|where|who|whom|whose|which|why|how|is|are|was|were|do|does|did|can|could)\b)([^?]+?)\s*\?*\s*$")
NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][\w.-]*(?:\s+[A-Z][\w.-]*)*")

# ------------------------------------------------------------------ replies: a model declining
# Ways a small model says it cannot answer from the context.
MODEL_ABSTAINS = re.compile(
    r"\b(i don'?t know|i do not know|not (?:mentioned|stated|provided|specified|given|found)|"
    r"(?:context|text|documents?) (?:does|do) not (?:contain|mention|say|provide|specify)|"
    r"no (?:information|answer)|cannot (?:be )?(?:answer|determine)|unable to (?:answer|determine))\b",
    re.IGNORECASE)

# ------------------------------------------------------------------ answerability: words that tell little
# Words too common to tie evidence to a question ("How long does it take light to reach Earth?" and a sentence
# on a war "long before the First Crusade").
GENERIC_WORDS = frozenset("long take took many much first last time times year years people name named called "
                          "used use make made new one two number known large small high best most part area type "
                          "kind way also still later early".split())
CONTRACTION = re.compile(r"(?i)(\w+)n['’]t\b")

# Words saying opposite things of one subject ("men" / "women", "increase" / "decrease"), in pairs: data, in
# rag/core/languages.toml. (``OPPOSITES`` above are the few a yes/no answer's polarity turns on.)
OPPOSITE_PAIRS = tuple(tuple(pair.split()) for pair in LANGUAGE_RULES["en"].get("opposites", ()))

# ------------------------------------------------------------------ answerability: the group a rule is for
# Who a question or a statement speaks of: a plural noun after "for" or "to" ("VPN access for employees",
# "keys are issued to administrators"), the subject of a question ("How many days may contractors work …?") or
# of a sentence, in its first two words ("Contractors need …", "Remote employees must …").
GROUP_DETERMINER = r"(?:(?:the|a|an|all|every|each|any|their|our|my|your)\s+)?"
GROUP_AFTER = re.compile(r"\b(for|to)\s+" + GROUP_DETERMINER + r"([A-Za-z][\w-]*)", re.IGNORECASE)
QUESTION_SUBJECT = re.compile(r"\b(?:may|can|do|must|should|are|will|could|would)\s+" + GROUP_DETERMINER
                              + r"([A-Za-z][\w-]*)", re.IGNORECASE)
GROUP_GOVERNORS = 4  # the words before "for" / "to" that tie two such phrases to one thing ("access", "issued")


def plural(word: str) -> bool:
    """Reads as an English plural noun: "employees", "contractors" (not "access", "status", "analysis")."""
    lowered = word.lower()
    return len(lowered) > 3 and lowered.endswith("s") and not lowered.endswith(("ss", "us", "is"))
