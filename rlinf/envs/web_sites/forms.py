"""The forms site (``/forms/``): a four-step sign-up flow ending in a checkable confirmation code.

Steps (all GET, the values carried in the URL and in hidden fields, so the server keeps no state):
``/signup/name`` (a "Full name" text box) -> ``/signup/city?name=`` (a "City" list box of
:data:`N_FORM_CITIES` wiki cities) -> ``/signup/plan?name=&city=`` (a "Plan" radio group) ->
``/signup/confirm?...`` (a summary and a Confirm button) -> ``/signup/done?...``, which shows
:func:`confirmation_code` of the entered values. A step reached with a missing or unknown value
shows the step that asks for it again, with an error message.
"""

from __future__ import annotations

import hashlib

from rlinf.envs.web_sites.catalog import WikiCatalog
from rlinf.envs.web_sites.pages import Request, Response, esc, link, not_found, page

NAV = [("/forms/", "Forms home")]
PLANS = {"basic": "Basic", "standard": "Standard", "premium": "Premium"}
N_FORM_CITIES = 8
MAX_NAME = 60


def canonical_name(name: str) -> str:
    """The name as the code sees it: inner spaces collapsed, lower case.

    Example:
        >>> canonical_name("  Ada   LIND ")
        'ada lind'
    """
    return " ".join(name.split()).lower()


def confirmation_code(name: str, city: str, plan: str) -> str:
    """The code the flow shows: first 6 hex digits of SHA-1 of ``name|city|plan`` (canonical,
    lower case), so an answer can be checked without the server.

    Example:
        >>> a = confirmation_code("Ada Lind", "Brenwick", "Standard")
        >>> a == confirmation_code(" ada  lind", "brenwick", "standard")
        True
        >>> len(confirmation_code("Ada Lind", "Brenwick", "standard"))
        6
    """
    text = f"{canonical_name(name)}|{canonical_name(city)}|{canonical_name(plan)}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]


def form_cities(wiki: WikiCatalog) -> list[str]:
    """The city names the sign-up offers: the first :data:`N_FORM_CITIES` wiki cities, sorted.

    Example:
        >>> from rlinf.envs.web_sites.catalog import wiki_catalog
        >>> len(form_cities(wiki_catalog(0)))
        8
    """
    return sorted(c.name for c in wiki.cities[:N_FORM_CITIES])


def _hidden(values: dict[str, str]) -> str:
    return "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in values.items())


def _step(title: str, number: int, inner: str, action: str, carried: dict[str, str], error: str = "",
          button: str = "Next") -> Response:
    """One step page: heading, optional error, a GET form to ``action``."""
    body = (f"<h1>{esc(title)}</h1><p>Step {number} of 4</p>"
            + (f'<p class="error" role="alert">{esc(error)}</p>' if error else "")
            + f'<form action="{esc(action)}" method="get">{_hidden(carried)}{inner}'
            + f' <button type="submit">{esc(button)}</button></form>')
    return Response(200, page(f"{title} - step {number} of 4 | Sign up", body, NAV))


class FormsSite:
    """The sign-up flow, answering requests whose path is relative to ``/forms``.

    Example:
        >>> from rlinf.envs.web_sites.catalog import wiki_catalog
        >>> site = FormsSite(wiki_catalog(0))
        >>> city = site.cities[0]
        >>> r = site.handle(Request("GET", "/signup/done", {"name": "Ada Lind", "city": city, "plan": "basic"}))
        >>> confirmation_code("Ada Lind", city, "basic") in r.body
        True
    """

    def __init__(self, wiki: WikiCatalog) -> None:
        self.cities = form_cities(wiki)

    def handle(self, request: Request) -> Response:
        """Routes one request; unknown paths are 404."""
        path = request.path.rstrip("/") or "/"
        if path == "/":
            body = ("<h1>Sign up</h1><p>Create an account in four short steps: your name, your city, "
                    "a plan, and a final check.</p><p>" + link("/forms/signup/name", "Start sign-up") + "</p>")
            return Response(200, page("Sign up | Forms", body, NAV))
        steps = {"/signup/name": 1, "/signup/city": 2, "/signup/plan": 3, "/signup/confirm": 4, "/signup/done": 5}
        if path not in steps:
            return not_found(f"No forms page at /forms{request.path}", NAV)
        name = " ".join(request.param("name").split())
        city, plan = request.param("city"), request.param("plan").lower()
        wanted = steps[path]
        # the first missing or bad value sends the user back to the step that asks for it
        if wanted >= 2 and (not name or len(name) > MAX_NAME):
            return self._name(name, "Please enter your full name." if not name
                              else f"Please use at most {MAX_NAME} characters.")
        if wanted >= 3 and city not in self.cities:
            return self._city(name, city, "Please choose a city from the list.")
        if wanted >= 4 and plan not in PLANS:
            return self._plan(name, city, plan, "Please choose a plan.")
        if wanted == 1:
            return self._name(name)
        if wanted == 2:
            return self._city(name, city)
        if wanted == 3:
            return self._plan(name, city, plan)
        if wanted == 4:
            return self._confirm(name, city, plan)
        code = confirmation_code(name, city, plan)
        body = (f"<h1>Sign-up complete</h1><p>Thank you, {esc(name)}.</p>"
                f"<p>Your confirmation code is: <strong>{code}</strong></p>"
                f"<p>{link('/forms/', 'Back to forms home')}</p>")
        return Response(200, page("Sign-up complete | Sign up", body, NAV))

    def _name(self, name: str, error: str = "") -> Response:
        inner = (f'<label for="name">Full name</label> '
                 f'<input id="name" name="name" type="text" autocomplete="off" value="{esc(name)}">')
        return _step("Your name", 1, inner, "/forms/signup/city", {}, error)

    def _city(self, name: str, city: str, error: str = "") -> Response:
        options = "".join(f'<option value="{esc(c)}"{" selected" if c == city else ""}>{esc(c)}</option>'
                          for c in self.cities)
        inner = (f'<label for="city">City</label> '
                 f'<select id="city" name="city" size="{len(self.cities)}">{options}</select>')
        return _step("Your city", 2, inner, "/forms/signup/plan", {"name": name}, error)

    def _plan(self, name: str, city: str, plan: str, error: str = "") -> Response:
        radios = "".join(f'<label><input type="radio" name="plan" value="{key}"'
                         f'{" checked" if key == plan else ""}> {label}</label> ' for key, label in PLANS.items())
        inner = f"<fieldset><legend>Plan</legend>{radios}</fieldset>"
        return _step("Your plan", 3, inner, "/forms/signup/confirm", {"name": name, "city": city}, error)

    def _confirm(self, name: str, city: str, plan: str) -> Response:
        summary = (f'<dl aria-label="Your details"><dt>Name</dt><dd>{esc(name)}</dd><dt>City</dt>'
                   f"<dd>{esc(city)}</dd><dt>Plan</dt><dd>{PLANS[plan]}</dd></dl>")
        return _step("Check your details", 4, summary, "/forms/signup/done",
                     {"name": name, "city": city, "plan": plan}, button="Confirm")
