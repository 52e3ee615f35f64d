"""The wiki site (``/wiki/``): an index, article pages about fictional cities and people, search.

Routes below the prefix: ``/`` (search box, then every city and person as a link), ``/article/<slug>``
and ``/search?q=`` (case-insensitive substring of the title). A city article has an infobox-like
definition list (country, founded, population) and links to the people born there; a person
article names the city of birth as a link (its country is only on the city's page, so "where was
X born" questions need two hops).
"""

from __future__ import annotations

from rlinf.envs.web_sites.catalog import City, Person, WikiCatalog
from rlinf.envs.web_sites.pages import Request, Response, esc, link, link_list, not_found, page, search_form

NAV = [("/wiki/", "Wiki index")]


def _infobox(rows: list[tuple[str, str]]) -> str:
    """A definition list from ``(term, html)`` pairs; the values are already HTML."""
    return '<dl aria-label="Facts">' + "".join(f"<dt>{esc(t)}</dt><dd>{v}</dd>" for t, v in rows) + "</dl>"


class WikiSite:
    """The wiki, answering requests whose path is relative to ``/wiki``.

    Example:
        >>> from rlinf.envs.web_sites.catalog import wiki_catalog
        >>> wiki = wiki_catalog(0)
        >>> city = wiki.cities[0]
        >>> r = WikiSite(wiki).handle(Request("GET", f"/article/{city.slug}"))
        >>> r.status, f"<dd>{city.founded}</dd>" in r.body
        (200, True)
    """

    def __init__(self, catalog: WikiCatalog) -> None:
        self.catalog = catalog

    def handle(self, request: Request) -> Response:
        """Routes one request; unknown paths are 404."""
        path = request.path.rstrip("/") or "/"
        parts = path.strip("/").split("/")
        if path == "/":
            return self._index()
        if parts[0] == "article" and len(parts) == 2:
            return self._article(parts[1])
        if path == "/search":
            return self._search(request.query.get("q", ""))
        return not_found(f"No wiki page at /wiki{request.path}", NAV)

    def _index(self) -> Response:
        cities = sorted(self.catalog.cities, key=lambda c: c.name)
        people = sorted(self.catalog.people, key=lambda p: p.name)
        body = ("<h1>Wiki</h1>" + search_form("/wiki/search", "Search articles")
                + "<h2>Cities</h2>" + link_list([(f"/wiki/article/{c.slug}", c.name) for c in cities])
                + "<h2>People</h2>" + link_list([(f"/wiki/article/{p.slug}", p.name) for p in people]))
        return Response(200, page("Wiki index", body, NAV))

    def _article(self, slug: str) -> Response:
        city, person = self.catalog.city(slug), self.catalog.person(slug)
        if city is not None:
            return self._city(city)
        if person is not None:
            return self._person(person)
        return not_found(f"No article named {slug!r}", NAV)

    def _city(self, city: City) -> Response:
        natives = self.catalog.born_in(city.slug)
        body = (f"<h1>{esc(city.name)}</h1>"
                + _infobox([("Country", esc(city.country)), ("Founded", str(city.founded)),
                            ("Population", f"{city.population:,}")])
                + f"<p>{esc(city.name)} is a city in {esc(city.country)}, founded in {city.founded}.</p>")
        if natives:
            body += "<h2>People born here</h2>" + link_list([(f"/wiki/article/{p.slug}", p.name) for p in natives])
        return Response(200, page(f"{city.name} | Wiki", body, NAV))

    def _person(self, person: Person) -> Response:
        city = self.catalog.city(person.born_in)
        assert city is not None, f"person {person.slug} born in unknown city {person.born_in}"
        birthplace = link(f"/wiki/article/{city.slug}", city.name)
        body = (f"<h1>{esc(person.name)}</h1>"
                + _infobox([("Born in", birthplace), ("Birth year", str(person.birth_year)),
                            ("Profession", esc(person.profession))])
                + f"<p>{esc(person.name)} is a {esc(person.profession)}, born in {esc(city.name)} "
                  f"in {person.birth_year}.</p>")
        return Response(200, page(f"{person.name} | Wiki", body, NAV))

    def _search(self, query: str) -> Response:
        q = query.strip()
        found = self.catalog.search(q)
        if not q:
            result = "<p>Type an article title and press Search.</p>"
        elif not found:
            result = f"<p>No articles match &quot;{esc(q)}&quot;.</p>"
        else:
            result = (f"<p>{len(found)} article{'s' if len(found) != 1 else ''} found.</p>"
                      + link_list([(f"/wiki/article/{a.slug}", a.name) for a in found]))
        body = "<h1>Search results</h1>" + search_form("/wiki/search", "Search articles", q) + result
        return Response(200, page(f"Search: {q} | Wiki" if q else "Search | Wiki", body, NAV))
