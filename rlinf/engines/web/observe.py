"""What the policy sees of a page: set-of-marks JS, the compact text, the rich AX-tree text.

:data:`MARK_JS` runs in the page. It walks the DOM in document order, numbers every visible
interactive element that intersects the viewport (links, buttons, inputs, selects, textareas,
elements with a widget role, an ``onclick`` handler, a ``tabindex`` or a pointer cursor) by
setting ``data-rlinf-mark="<n>"`` (so actions find them with ``[data-rlinf-mark="n"]``), and
returns those elements and the visible static text blocks as a list of items.
:func:`render_items` turns the items into the text a small model reads, one line per element or
text block::

    heading "Kitchen"
    [3] link "Blue Kettle"
    [4] textbox "Search" value=""
    Price: $12.50

In ``coordinates`` mode the same lines carry the element's box centre instead of the mark
(``link "Blue Kettle" @(120,340)``). :func:`render_ax_tree` renders Chromium's full
accessibility tree (CDP ``Accessibility.getFullAXTree``, seed 000's ``use_rich_actree``) with
the marks (or centres) attached to the marked nodes. :data:`OVERLAY_JS` / :data:`CLEAR_OVERLAY_JS`
draw and remove the numbered boxes on screenshots; :data:`SAME_TAB_JS` keeps every navigation
in the instance's one tab.

Example::

    >>> items = [{"kind": "text", "tag": "heading", "text": "Kitchen"},
    ...          {"kind": "element", "id": 1, "role": "link", "name": "Blue Kettle", "box": [100, 330, 40, 20]}]
    >>> print(render_items(items, "set_of_marks"))
    heading "Kitchen"
    [1] link "Blue Kettle"
    >>> print(render_items(items, "coordinates"))
    heading "Kitchen"
    link "Blue Kettle" @(120,340)
"""

from __future__ import annotations

from typing import Any

#: the attribute that carries an element's mark
MARK_ATTR = "data-rlinf-mark"
#: characters kept of one element name or text block
MAX_TEXT = 120

MARK_JS = r"""
(args) => {
  const maxText = args.maxText;
  const vw = window.innerWidth, vh = window.innerHeight;
  for (const el of document.querySelectorAll('[data-rlinf-mark]')) el.removeAttribute('data-rlinf-mark');
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'IFRAME', 'OBJECT']);
  const WIDGETS = new Set(['button', 'link', 'checkbox', 'radio', 'textbox', 'searchbox', 'combobox',
    'menuitem', 'menuitemcheckbox', 'menuitemradio', 'option', 'switch', 'tab', 'slider', 'spinbutton',
    'treeitem', 'listbox']);
  const INLINE = new Set(['inline', 'inline-block', 'inline-flex', 'inline-grid', 'contents', 'none']);
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const cut = (s) => (s.length > maxText ? s.slice(0, maxText - 3) + '...' : s);
  const roleOf = (el) => {
    const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0];
    if (explicit) return explicit;
    const tag = el.tagName;
    if (tag === 'A' && el.hasAttribute('href')) return 'link';
    if (tag === 'BUTTON' || tag === 'SUMMARY') return 'button';
    if (tag === 'SELECT') return el.multiple ? 'listbox' : 'combobox';
    if (tag === 'TEXTAREA') return 'textbox';
    if (tag === 'INPUT') {
      const t = (el.getAttribute('type') || 'text').toLowerCase();
      if (t === 'hidden') return null;
      if (t === 'checkbox' || t === 'radio') return t;
      if (['button', 'submit', 'reset', 'image', 'file'].includes(t)) return 'button';
      if (t === 'range') return 'slider';
      if (t === 'number') return 'spinbutton';
      if (t === 'search') return 'searchbox';
      return 'textbox';
    }
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';
    return null;
  };
  const interactiveRole = (el, style) => {
    const role = roleOf(el);
    if (role && (WIDGETS.has(role) || el.tagName === 'INPUT')) return role;
    if (el.hasAttribute('onclick') || typeof el.onclick === 'function') return role || 'clickable';
    const tab = el.getAttribute('tabindex');
    if (tab !== null && parseInt(tab, 10) >= 0) return role || 'clickable';
    if (style.cursor === 'pointer' && !(el.parentElement &&
        getComputedStyle(el.parentElement).cursor === 'pointer')) return role || 'clickable';
    return null;
  };
  const labelText = (el) => {
    if (el.labels && el.labels.length) {
      return clean(Array.from(el.labels).map((l) => l.innerText).join(' '));
    }
    return '';
  };
  const nameOf = (el, role) => {
    const aria = clean(el.getAttribute('aria-label'));
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = clean(by.split(/\s+/).map((id) => {
        const n = document.getElementById(id); return n ? n.innerText : '';
      }).join(' '));
      if (t) return t;
    }
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
      const t = (el.getAttribute('type') || '').toLowerCase();
      if (tag === 'INPUT' && ['button', 'submit', 'reset'].includes(t)) {
        return clean(el.value) || (t === 'reset' ? 'Reset' : 'Submit');
      }
      if (t === 'image') return clean(el.getAttribute('alt')) || 'Submit';
      return labelText(el) || clean(el.getAttribute('placeholder')) || clean(el.getAttribute('title'))
        || clean(el.getAttribute('name'));
    }
    let text = clean(el.innerText);
    if (!text) {
      const img = el.querySelector('img[alt]');
      text = img ? clean(img.getAttribute('alt')) : '';
    }
    return text || clean(el.getAttribute('title'));
  };
  const inView = (r) => r.width >= 1 && r.height >= 1 && r.bottom > 0 && r.right > 0 && r.top < vh && r.left < vw;
  const items = [];
  let mark = 0;
  let buf = [];
  const flush = () => {
    if (!buf.length) return;
    const text = clean(buf.map((b) => b.text).join(' '));
    if (text) items.push({kind: 'text', tag: buf[0].tag, text: cut(text)});
    buf = [];
  };
  const hasWidgetInside = (el) => el.querySelector('a[href],button,input,select,textarea,[role],[onclick]') !== null;
  const walk = (node, tag, quiet) => {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) {
        const t = child.textContent;
        if (quiet || !t || !t.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(child);
        if (inView(range.getBoundingClientRect())) buf.push({tag, text: t});
        continue;
      }
      if (child.nodeType !== Node.ELEMENT_NODE || SKIP.has(child.tagName)) continue;
      if (child.tagName === 'BR') { flush(); continue; }
      const style = getComputedStyle(child);
      if (style.display === 'none' || style.visibility === 'hidden' || child.getAttribute('aria-hidden') === 'true'
          || child.hidden) continue;
      const role = interactiveRole(child, style);
      if (role) {
        const r = child.getBoundingClientRect();
        if (inView(r)) {
          flush();
          mark += 1;
          child.setAttribute('data-rlinf-mark', String(mark));
          const item = {kind: 'element', id: mark, role, name: cut(nameOf(child, role)),
            box: [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)]};
          if (['textbox', 'searchbox', 'spinbutton', 'combobox', 'slider'].includes(role)) {
            item.value = cut(child.tagName === 'SELECT'
              ? clean(child.selectedOptions.length ? child.selectedOptions[0].text : '')
              : (child.isContentEditable ? clean(child.innerText) : (child.value || '')));
          }
          if (role === 'checkbox' || role === 'radio' || role === 'switch') {
            item.checked = child.checked === undefined
                ? child.getAttribute('aria-checked') === 'true' : !!child.checked;
          }
          if (child.disabled || child.getAttribute('aria-disabled') === 'true') item.disabled = true;
          items.push(item);
        }
        if (role !== 'clickable' || !hasWidgetInside(child)) continue;
      }
      // a label's text is its control's name: shown once, on the control's line
      const hush = quiet || (child.tagName === 'LABEL' && !!child.control);
      if (INLINE.has(style.display)) { walk(child, tag, hush); continue; }
      flush();
      walk(child, /^H[1-6]$/.test(child.tagName) ? 'heading' : 'text', hush);
      flush();
    }
  };
  if (document.body) walk(document.body, 'text', false);
  flush();
  const se = document.scrollingElement || document.documentElement;
  return {items, scroll: {y: Math.round(window.scrollY), height: Math.round(se.scrollHeight), viewport: vh}};
}
"""

OVERLAY_JS = r"""
() => {
  const old = document.getElementById('__rlinf_overlay');
  if (old) old.remove();
  const layer = document.createElement('div');
  layer.id = '__rlinf_overlay';
  layer.style.cssText = 'position:fixed;left:0;top:0;width:0;height:0;z-index:2147483647;pointer-events:none';
  const colors = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#008080', '#9a6324', '#800000'];
  for (const el of document.querySelectorAll('[data-rlinf-mark]')) {
    const r = el.getBoundingClientRect();
    const c = colors[parseInt(el.getAttribute('data-rlinf-mark'), 10) % colors.length];
    const box = document.createElement('div');
    box.style.cssText = `position:fixed;left:${r.left}px;top:${r.top}px;width:${r.width}px;height:${r.height}px;` +
      `border:2px solid ${c};box-sizing:border-box`;
    const tag = document.createElement('div');
    tag.textContent = el.getAttribute('data-rlinf-mark');
    tag.style.cssText = `position:fixed;left:${r.left}px;top:${Math.max(0, r.top - 14)}px;background:${c};` +
      'color:#fff;font:bold 11px/14px monospace;padding:0 3px';
    layer.appendChild(box);
    layer.appendChild(tag);
  }
  document.documentElement.appendChild(layer);
}
"""

CLEAR_OVERLAY_JS = "() => { const o = document.getElementById('__rlinf_overlay'); if (o) o.remove(); }"

#: an init script for every page: links / forms with a target and ``window.open`` stay in the tab
SAME_TAB_JS = """(() => {
  window.open = function (u) { if (u) { location.href = u; } return window; };
  const own = (e) => { const t = e.target && e.target.closest && e.target.closest('a[target],form[target]');
                       if (t) t.target = '_self'; };
  document.addEventListener('click', own, true);
  document.addEventListener('submit', own, true);
})();"""

#: AX roles never shown in the rich tree (their children are)
_AX_SKIP = {"none", "generic", "InlineTextBox", "LineBreak", "presentation", "ignored"}
#: AX properties worth a word in the rich tree
_AX_PROPS = ("level", "checked", "expanded", "selected", "disabled", "required", "focused")


def _quote(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'


def centre(box: list[int]) -> tuple[int, int]:
    """The centre of an ``[x, y, w, h]`` box, rounded to pixels.

    >>> centre([100, 330, 40, 20])
    (120, 340)
    """
    x, y, w, h = box
    return round(x + w / 2), round(y + h / 2)


def element_line(item: dict[str, Any], mode: str) -> str:
    """One marked element as a line: ``[3] textbox "Search" value=""`` or, in coordinates mode,
    ``textbox "Search" value="" @(120,340)``.

    >>> box = {"id": 2, "role": "checkbox", "name": "I agree", "checked": False, "box": [0, 0, 10, 10]}
    >>> element_line(box, "set_of_marks")
    '[2] checkbox "I agree" checked=false'
    """
    parts = [item["role"], _quote(item.get("name") or "")]
    if "value" in item:
        parts.append(f"value={_quote(item['value'])}")
    if "checked" in item:
        parts.append(f"checked={'true' if item['checked'] else 'false'}")
    if item.get("disabled"):
        parts.append("disabled")
    body = " ".join(parts)
    if mode == "coordinates":
        x, y = centre(item["box"])
        return f"{body} @({x},{y})"
    return f"[{item['id']}] {body}"


def render_items(items: list[dict[str, Any]], mode: str, scroll: dict[str, int] | None = None) -> str:
    """The compact observation text: elements and text blocks in page order, plus
    ``(more above)`` / ``(more below)`` when the page scrolls further (``scroll`` from
    :data:`MARK_JS`)."""
    lines: list[str] = []
    if scroll and scroll.get("y", 0) > 0:
        lines.append("(more above)")
    for item in items:
        if item["kind"] == "element":
            lines.append(element_line(item, mode))
        elif item.get("tag") == "heading":
            lines.append(f"heading {_quote(item['text'])}")
        else:
            lines.append(item["text"])
    if scroll and scroll.get("y", 0) + scroll.get("viewport", 0) < scroll.get("height", 0) - 1:
        lines.append("(more below)")
    return "\n".join(lines)


def marks_by_backend_node(dom_root: dict[str, Any]) -> dict[int, int]:
    """``backendNodeId -> mark`` from a CDP ``DOM.getDocument(depth=-1)`` tree.

    >>> marks_by_backend_node({"backendNodeId": 1, "children": [
    ...     {"backendNodeId": 7, "attributes": ["href", "/a", "data-rlinf-mark", "2"]}]})
    {7: 2}
    """
    out: dict[int, int] = {}
    stack = [dom_root]
    while stack:
        node = stack.pop()
        attrs = node.get("attributes") or []
        for i in range(0, len(attrs) - 1, 2):
            if attrs[i] == MARK_ATTR and attrs[i + 1].isdigit():
                out[node["backendNodeId"]] = int(attrs[i + 1])
        stack.extend(node.get("children") or [])
        if node.get("contentDocument"):
            stack.append(node["contentDocument"])
    return out


def _ax_value(field: dict[str, Any] | None) -> Any:
    return (field or {}).get("value")


def _ax_line(node: dict[str, Any], role: str, name: str, marks: dict[int, int],
             elements: dict[int, dict[str, Any]], mode: str) -> str:
    words = [role, _quote(name)] if name else [role]
    value = _ax_value(node.get("value"))
    if value not in (None, "") or role in ("textbox", "searchbox", "combobox"):
        words.append(f"value={_quote(str(value or ''))}")
    for prop in node.get("properties") or []:
        if prop.get("name") in _AX_PROPS:
            words.append(f"{prop['name']}={str(_ax_value(prop.get('value'))).lower()}")
    text = " ".join(words)
    mark = marks.get(node.get("backendDOMNodeId", -1))
    if mark is not None and mode == "coordinates" and mark in elements:
        x, y = centre(elements[mark]["box"])
        return f"{text} @({x},{y})"
    if mark is not None and mode != "coordinates":
        return f"[{mark}] {text}"
    return text


def render_ax_tree(nodes: list[dict[str, Any]], marks: dict[int, int], elements: dict[int, dict[str, Any]],
                   mode: str) -> str:
    """Chromium's full AX tree (CDP ``Accessibility.getFullAXTree`` nodes) as indented lines
    ``role "name" prop=value``; nodes of marked elements carry ``[n]`` (or ``@(x,y)`` in
    coordinates mode). ``marks`` maps backend DOM node ids to marks, ``elements`` marks to items.

    >>> nodes = [{"nodeId": "1", "role": {"value": "RootWebArea"}, "name": {"value": "Home"}, "childIds": ["2"]},
    ...          {"nodeId": "2", "parentId": "1", "role": {"value": "link"}, "name": {"value": "A"},
    ...           "backendDOMNodeId": 9, "childIds": []}]
    >>> print(render_ax_tree(nodes, {9: 1}, {1: {"box": [0, 0, 10, 10]}}, "set_of_marks"))
    RootWebArea "Home"
      [1] link "A"
    """
    by_id = {n["nodeId"]: n for n in nodes}
    roots = [n for n in nodes if not n.get("parentId") or n["parentId"] not in by_id]
    lines: list[str] = []
    stack: list[tuple[dict[str, Any], int, str]] = [(root, 0, "") for root in reversed(roots)]
    while stack:  # depth-first, pre-order, without recursion (deep pages)
        node, depth, parent_name = stack.pop()
        role = str(_ax_value(node.get("role")) or "")
        name = str(_ax_value(node.get("name")) or "").strip()
        shown = not node.get("ignored") and role not in _AX_SKIP
        if role == "StaticText" and (not name or name == parent_name):
            shown = False
        if shown:
            lines.append("  " * depth + _ax_line(node, role, name, marks, elements, mode))
        children = [by_id[c] for c in node.get("childIds") or [] if c in by_id]
        for child in reversed(children):
            stack.append((child, depth + 1 if shown else depth, name if shown else parent_name))
    return "\n".join(lines)


async def read_page(page: Any, cdp: Any, mode: str, rich: bool) -> dict[str, Any]:
    """Mark the page (Playwright ``page``) and read it: ``{"text", "elements": [{"id", "role",
    "name", "box"}]}``; ``rich`` renders the full AX tree through the page's CDP session ``cdp``.

    >>> asyncio.run(read_page(page, cdp, "set_of_marks", False))["text"]  # doctest: +SKIP
    'heading "Kitchen"\\n[1] link "Blue Kettle"'
    """
    found = await page.evaluate(MARK_JS, {"maxText": MAX_TEXT})
    items = found["items"]
    elements = [{k: item[k] for k in ("id", "role", "name", "box")} for item in items if item["kind"] == "element"]
    if not rich:
        return {"text": render_items(items, mode, found["scroll"]), "elements": elements}
    dom = await cdp.send("DOM.getDocument", {"depth": -1, "pierce": False})
    tree = await cdp.send("Accessibility.getFullAXTree")
    text = render_ax_tree(tree["nodes"], marks_by_backend_node(dom["root"]), {e["id"]: e for e in elements}, mode)
    return {"text": text, "elements": elements}


async def take_screenshot(page: Any, marks: bool, timeout_s: float) -> bytes:
    """A PNG of the viewport; with ``marks`` the page is marked afresh and the numbered boxes are
    drawn for the shot, then removed.

    >>> asyncio.run(take_screenshot(page, True, 10.0))[:4]  # doctest: +SKIP
    b'\\x89PNG'
    """
    if not marks:
        return await page.screenshot(type="png", timeout=timeout_s * 1000)
    await page.evaluate(MARK_JS, {"maxText": MAX_TEXT})
    await page.evaluate(OVERLAY_JS)
    try:
        return await page.screenshot(type="png", timeout=timeout_s * 1000)
    finally:
        await page.evaluate(CLEAR_OVERLAY_JS)
