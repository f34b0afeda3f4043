#!/usr/bin/env python3
"""The console as a person uses it, in headless Chromium (Debian's chromium + chromium-driver).

Run by tests/tests/e2e/browser.rs (`the_console_in_a_real_browser`):

    console.py BASE_URL INVITE_PATH EMAIL SHOTS_DIR OUTBOX_DIR EXPIRED_INVITE_PATH \
        PARTNER_JOIN_PATH OTHER_PARTNER_ID CHECKOUT_BASE

Drives the pages by their visible labels and button texts: accept the invitation by signing up
(every acceptance and join completes with the code mailed to the address, read from the outbox),
see the organization's overview, sign out, fail a sign-in, sign in, open the organization from the
list; create a key, call the gateway with it, see the call on the overview and the usage page (by
day and by hour), disable the key; create, rotate and revoke a billing token and read the billing
API with each; invite a member, read the audit log; a stale form refused (CSRF); the member signs
up and sees no key, token or member actions; reset the password by the mailed link; sign-in
throttled after repeated wrong passwords; an expired and a spent invitation explained. Then the
partner dashboard: the partner's owner signs up from the operator's link, makes a write token and
uses it on the partner API, rotates it (the old one refused at once), invites a viewer and reads
the partner's audit log; the viewer signs up and sees no token action; another partner's
dashboard is not found. On every page: no SEVERE entry in the browser's log (uncaught
JavaScript errors and CSP violations land there) and no serious or critical axe-core finding
(axe is injected through WebDriver, never a <script> tag, so the page's CSP stays strict). Saves a
screenshot of each page in SHOTS_DIR.

Prints one JSON object: {"steps": [...], "pages": {name: {"axe": [...], "log": [...]}}}, or
{"error": ...} on an unexpected exception.
"""

import base64
import datetime
import hashlib
import hmac
import http.server
import json
import os
import struct
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import Select, WebDriverWait

HERE = os.path.dirname(os.path.abspath(__file__))
AXE = open(os.path.join(HERE, "vendor", "axe-core", "axe.min.js"), encoding="utf-8").read()
PASSWORD = "correct horse battery staple"


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def field(driver, label_text):
    """The input a <label> with this visible text names (as a person finds it)."""
    for label in driver.find_elements(By.TAG_NAME, "label"):
        if label.text.strip() == label_text:
            return driver.find_element(By.ID, label.get_attribute("for"))
    raise AssertionError(f"no field labelled {label_text!r} on {driver.current_url}")


def button(driver, text):
    for b in driver.find_elements(By.TAG_NAME, "button"):
        if b.text.strip() == text:
            return b
    raise AssertionError(f"no button {text!r} on {driver.current_url}")


def press(driver, element):
    """Clicks `element` and waits for the page it leads to (a form post or a link)."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def left(_):
        # The old page's root is gone once the new page loaded; chromedriver reports that as a
        # stale element or, mid-navigation, as a generic inspector error.
        try:
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    WebDriverWait(driver, 15).until(left)


def link(driver, text):
    for a in driver.find_elements(By.TAG_NAME, "a"):
        if a.text.strip() == text:
            return a
    raise AssertionError(f"no link {text!r} on {driver.current_url}")


def has_button(driver, text):
    return any(b.text.strip() == text for b in driver.find_elements(By.TAG_NAME, "button"))


def status_of(url, token):
    """The HTTP status of a billing API read with `token`."""
    try:
        return urllib.request.urlopen(urllib.request.Request(
            url, headers={"Authorization": f"Bearer {token}"})).status
    except urllib.error.HTTPError as e:
        return e.code


def mailed_link(outbox, marker, seen, to=None):
    """The first link containing `marker` in a mail of `outbox` not in `seen` (and addressed to
    `to`, when given); waits up to 10 s: the mail is sent just after the page answers."""
    for _ in range(100):
        for name in sorted(os.listdir(outbox)):
            if name in seen:
                continue
            text = open(os.path.join(outbox, name), encoding="utf-8", errors="replace").read()
            text = text.replace("=\r\n", "").replace("=\n", "")
            at = text.find(marker)
            if at < 0 or (to is not None and to not in text):
                continue
            start = text.rfind("http", 0, at)
            end = at
            while end < len(text) and (text[end].isalnum() or text[end] in "/-_"):
                end += 1
            seen.add(name)
            return text[start:end]
        time.sleep(0.1)
    raise AssertionError(f"no mail with {marker!r} in {outbox}")


def mailed_code(outbox, to, seen):
    """The 8-digit code alone on a line of the newest mail to `to` titled "Your Tollgate
    verification code" that is not in `seen`; waits up to 10 s (it is sent after the answer)."""
    for _ in range(100):
        found = []
        for name in os.listdir(outbox):
            if name in seen:
                continue
            path = os.path.join(outbox, name)
            text = open(path, encoding="utf-8", errors="replace").read()
            text = text.replace("=\r\n", "").replace("=\n", "")
            if "verification code" not in text or to not in text:
                continue
            lines = [l.strip() for l in text.splitlines()]
            codes = [l for l in lines if len(l) == 8 and l.isdigit()]
            if codes:
                found.append((os.path.getmtime(path), name, codes[0]))
        if found:
            found.sort()
            _, name, code = found[-1]
            seen.add(name)
            return code
        time.sleep(0.1)
    raise AssertionError(f"no verification code for {to} in {outbox}")


def prove(d, run, outbox, to, shot, done_button):
    """The second step of every acceptance: the code mailed to `to`, typed where the page's
    "Verification code" label says, then `done_button`."""
    assert "Verification code" in d.page_source, d.page_source
    run.check(shot)
    field(d, "Verification code").send_keys(mailed_code(outbox, to, PROVEN))
    press(d, button(d, done_button))


# Mails whose code was read already (each is read once).
PROVEN = set()


def totp(key_text, at=None):
    """The 6-digit RFC 6238 code of a base32 key at `at` (now): what an authenticator app shows."""
    key = key_text.replace(" ", "")
    key = base64.b32decode(key + "=" * (-len(key) % 8))
    mac = hmac.new(key, struct.pack(">Q", int((at or time.time()) // 30)), hashlib.sha1).digest()
    o = mac[-1] & 15
    return "%06d" % ((struct.unpack(">I", mac[o:o + 4])[0] & 0x7FFFFFFF) % 1000000)


class Run:
    def __init__(self, driver, shots):
        self.driver = driver
        self.shots = shots
        self.pages = {}
        self.steps = []

    def check(self, name):
        """Axe, the browser log and a screenshot of the page as it is now."""
        d = self.driver
        d.execute_script(AXE)
        result = d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.length}))), e => done([{id: 'axe-error', impact: 'critical',"
            " help: String(e), nodes: 0}]));")
        # SEVERE entries: JavaScript errors, CSP violations, failed subresources. The page's own
        # deliberate status (a 401 sign-in, a 410 spent link) is logged too; it is not an error.
        own = d.current_url + " "
        log = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"
               and not (e.get("source") == "network" and e.get("message", "").startswith(own))]
        # The whole page, not only the first screen: grow the window to the page, then back.
        height = d.execute_script("return document.documentElement.scrollHeight")
        d.set_window_size(1280, max(900, min(int(height) + 140, 4000)))
        d.save_screenshot(os.path.join(self.shots, f"{name}.png"))
        d.set_window_size(1280, 900)
        self.pages[name] = {"axe": result, "log": log, "title": d.title, "url": d.current_url}

    def step(self, what):
        self.steps.append(what)


class Hook(http.server.BaseHTTPRequestHandler):
    """A partner's webhook receiver on loopback: records each delivery, answers 200."""
    got = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Hook.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"thanks")

    def log_message(self, *args):
        pass


def receiver():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/hook"


def signed(secret, header, body):
    """The README's check of Tollgate-Signature (t=…,v1=…)."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"]) and abs(time.time() - int(parts["t"])) <= 300


def partner_api(base, token, path="/me"):
    """Status and JSON of a partner API read with `token`."""
    try:
        r = urllib.request.urlopen(urllib.request.Request(
            base + "/partner/v1" + path, headers={"Authorization": f"Bearer {token}"}))
        return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def row_button(driver, cell_text, text):
    """The button `text` in the table row that has a cell `cell_text`."""
    for tr in driver.find_elements(By.CSS_SELECTOR, "table.data tbody tr"):
        if cell_text in [td.text.strip() for td in tr.find_elements(By.TAG_NAME, "td")]:
            for b in tr.find_elements(By.TAG_NAME, "button"):
                if b.text.strip() == text:
                    return b
    raise AssertionError(f"no {text!r} in a row with {cell_text!r} on {driver.current_url}")


def partner_flow(d, run, base, partner_join, other_partner, outbox, checkout):
    """The partner dashboard, from the operator's sign-up link (issue 29)."""
    pat = "pat@acme.example"
    if d.find_elements(By.XPATH, "//button[normalize-space()='Sign out']"):
        press(d, button(d, "Sign out"))
    d.get(base + partner_join)
    run.check("partner-join")
    field(d, "Email").send_keys(pat)
    field(d, "Password").send_keys(PASSWORD)
    press(d, button(d, "Continue"))
    prove(d, run, outbox, pat, "partner-join-code", "Join")
    assert "/console/partners/" in d.current_url, d.current_url
    assert "Partner dashboard" in d.page_source
    run.check("partner-overview")
    press(d, link(d, "Partner tokens"))
    run.check("partner-tokens")
    Select(field(d, "Scope")).select_by_visible_text("partner:write (reads and changes)")
    press(d, button(d, "Create token"))
    token = d.find_element(By.ID, "new-token").text.strip()
    status, me = partner_api(base, token)
    assert status == 200 and me["data"]["role"] == "owner", (status, me)
    run.check("partner-token-created")
    run.step("the partner's owner signed up from the operator's link, made a write token and used it")
    d.get(d.current_url)
    assert token not in d.page_source, "a token is shown once"
    press(d, row_button(d, pat, "Rotate"))
    rotated = d.find_element(By.ID, "new-token").text.strip()
    assert partner_api(base, token)[0] == 401
    assert partner_api(base, rotated)[0] == 200
    run.check("partner-token-rotated")
    run.step("rotated the partner token: the old one is refused at once")
    # A webhook endpoint (issue 45): registered here, its secret shown once.
    press(d, link(d, "Webhooks"))
    run.check("partner-webhooks")
    hook_url = receiver()
    field(d, "Endpoint URL").send_keys(hook_url)
    field(d, "Description (optional)").send_keys("our CRM")
    press(d, button(d, "Register endpoint"))
    hook_secret = d.find_element(By.ID, "new-secret").text.strip()
    assert hook_secret.startswith("whsec_"), hook_secret
    assert "our CRM" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
    run.check("partner-webhook-registered")
    d.get(d.current_url)
    assert hook_secret not in d.page_source, "a secret is shown once"
    run.step("registered a webhook endpoint in the dashboard; its secret shown once")
    press(d, link(d, "Customers"))
    run.check("partner-customers")
    field(d, "Name").send_keys("Globex")
    field(d, "External id (your id for this customer)").send_keys("globex-1")
    field(d, "Contact email (the invitation goes here)").send_keys("ceo@globex.example")
    field(d, "Initial allocation (USD)").send_keys("5")
    rate = [l for l in d.find_elements(By.TAG_NAME, "label") if l.text.startswith("Retail rate multiplier")][0]
    rate_field = d.find_element(By.ID, rate.get_attribute("for"))
    rate_field.send_keys("0.5")
    press(d, button(d, "Create customer"))
    alert = d.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "PARTNER_RETAIL_RATE_BELOW_FLOOR" in alert, alert
    run.check("partner-customer-refused")
    rate = [l for l in d.find_elements(By.TAG_NAME, "label") if l.text.startswith("Retail rate multiplier")][0]
    rate_field = d.find_element(By.ID, rate.get_attribute("for"))
    assert rate_field.get_attribute("aria-invalid") == "true"
    rate_field.clear()
    rate_field.send_keys("1.5")
    press(d, button(d, "Create customer"))
    assert "was created and invited" in d.find_element(By.CSS_SELECTOR, "[role=status]").text
    assert "globex-1" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
    run.check("partner-customer-created")
    run.step("created a customer: a rate below the floor refused with its reason, then created")
    # The customer follows its invitation to an active organization.
    invite = mailed_link(outbox, "/invitations/", set(), to="ceo@globex.example")
    press(d, button(d, "Sign out"))
    d.get(base + invite[invite.find("/invitations/"):])
    field(d, "Email").send_keys("ceo@globex.example")
    field(d, "Password").send_keys(PASSWORD)
    press(d, button(d, "Continue"))
    prove(d, run, outbox, "ceo@globex.example", "customer-invitation-code", "Activate the organization")
    assert d.find_element(By.TAG_NAME, "h1").text == "Globex", d.page_source
    press(d, button(d, "Sign out"))
    field(d, "Email").send_keys("pat@acme.example")
    field(d, "Password").send_keys(PASSWORD)
    press(d, button(d, "Sign in"))
    press(d, link(d, "Acme"))
    press(d, link(d, "Customers"))
    press(d, link(d, "Globex"))
    assert "active" in d.find_element(By.CSS_SELECTOR, "[data-figure=status]").text
    run.step("the customer followed its invitation to an active organization")
    for _ in range(80):
        activated = [(h, b) for h, b in Hook.got if json.loads(b)["type"] == "customer.activated"]
        if activated:
            break
        time.sleep(0.25)
    assert len(activated) == 1, Hook.got
    headers, body = activated[0]
    assert signed(hook_secret, headers["tollgate-signature"], body), headers
    event_id = json.loads(body)["id"]
    customer_page = d.current_url
    press(d, link(d, "Webhooks"))
    press(d, [a for a in d.find_elements(By.TAG_NAME, "a") if a.text.strip().startswith("Deliveries")][0])
    assert "succeeded" in d.page_source and "answered 200" in d.page_source, d.page_source
    run.check("partner-webhook-deliveries")
    # The activation's own button (by its accessible name): a swept event (an invitation that
    # expired meanwhile) may be listed above it, newest first.
    press(d, d.find_element(By.CSS_SELECTOR, f'button[aria-label="Redeliver {event_id}"]'))
    assert "sent again" in d.find_element(By.CSS_SELECTOR, "[role=status]").text
    for _ in range(80):
        again = [b for h, b in Hook.got if json.loads(b)["id"] == event_id]
        if len(again) == 2:
            break
        time.sleep(0.25)
    assert len(again) == 2, Hook.got
    run.step("the activation reached the receiver signed; redelivered from the dashboard with the same event id")
    d.get(customer_page)
    Select(field(d, "Change")).select_by_visible_text("Increase")
    field(d, "Amount (USD)").send_keys("5")
    press(d, button(d, "Change allocation"))
    assert d.find_element(By.CSS_SELECTOR, "[data-figure=available]").text == "10.00 USD", d.page_source
    # Rounded for reading; the exact figure on hover (issue 45).
    assert d.find_element(By.CSS_SELECTOR, "[data-figure=available] data").get_attribute("title") == "10 USD"
    rate = d.find_element(By.CSS_SELECTOR, "input[name=retail_rate_multiplier]")
    rate.send_keys("0.5")
    press(d, d.find_element(By.XPATH, "//button[normalize-space()='Set rate']"))
    alert = d.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "PARTNER_RETAIL_RATE_BELOW_FLOOR" in alert, alert
    run.check("partner-customer-rate-refused")
    rate = d.find_element(By.CSS_SELECTOR, "input[name=retail_rate_multiplier]")
    rate.send_keys("1")
    press(d, d.find_element(By.XPATH, "//button[normalize-space()='Set rate']"))
    assert "The rate was changed" in d.find_element(By.CSS_SELECTOR, "[role=status]").text
    field(d, "Key name").send_keys("globex prod")
    press(d, button(d, "Create key"))
    key = d.find_element(By.ID, "new-key").text.strip()
    chat = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    answer = urllib.request.urlopen(urllib.request.Request(
        base + "/compat/v1/chat/completions", data=chat.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}))
    assert answer.status == 200
    run.check("partner-customer")
    run.step("funded the customer, a rate below the floor refused and one at it set, a key made and used")
    usage_url = d.current_url.split("/customers/")[0] + "/usage"
    for _ in range(60):
        d.get(usage_url)
        charged = d.find_element(By.CSS_SELECTOR, "[data-figure=charged]").text
        if charged != "0.00 USD":
            break
        time.sleep(0.25)
    assert charged != "0.00 USD", charged
    assert "Globex" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
    assert d.find_element(By.CSS_SELECTOR, "[data-figure=margin]").text.endswith("USD")
    run.check("partner-usage")
    # The customer's calls in the dashboard (issue 45), with their wholesale cost.
    press(d, link(d, "Customers"))
    press(d, link(d, "Globex"))
    press(d, link(d, "Requests of Globex"))
    shown = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.requests code.id")]
    assert shown == [answer.headers["x-request-id"]], (shown, d.page_source)
    assert "Wholesale (USD)" in d.page_source
    assert key not in d.page_source, "no key secret on the Requests page"
    run.check("partner-customer-requests")
    run.step("the customer's call shows on its Requests page in the dashboard")
    press(d, link(d, "Funding"))
    assert "funding added" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
    run.check("partner-funding")
    funding_url = d.current_url
    # "Add funds" and "Save a card" reach the payment page under the console's CSP (its
    # form-action names the checkout host: a form's redirect is held to it too).
    field(d, "Amount to add (USD)").send_keys("25")
    press(d, button(d, "Add funds"))
    assert d.current_url.startswith(checkout + "/pay/"), d.current_url
    assert "Checkout stand-in" in d.page_source
    d.get(funding_url)
    field(d, "When funding falls below (USD)").send_keys("10")
    field(d, "Charge the card (USD)").send_keys("50")
    press(d, button(d, "Save automatic recharge"))
    press(d, button(d, "Save a card"))
    assert d.current_url.startswith(checkout + "/pay/"), d.current_url
    d.get(funding_url)
    run.check("partner-funding-recharge")
    run.step("Add funds and Save a card lead to the payment page")
    run.step("the call shows in the partner's usage: charged, wholesale cost and margin by customer; the funding history from the ledger")
    press(d, link(d, "Team"))
    field(d, "Email address").send_keys("val@acme.example")
    Select(field(d, "Role")).select_by_visible_text("viewer")
    press(d, button(d, "Send invitation"))
    join = d.find_element(By.ID, "join-link").text.strip()
    run.check("partner-team")
    press(d, link(d, "Audit log"))
    assert "partner token rotated" in d.page_source and "member invited" in d.page_source
    run.check("partner-audit")
    run.step("invited a viewer to the team and read the partner's audit log")
    press(d, button(d, "Sign out"))
    d.get(base + join[join.find("/console/join/"):])
    field(d, "Email").send_keys("val@acme.example")
    field(d, "Password").send_keys(PASSWORD)
    press(d, button(d, "Continue"))
    prove(d, run, outbox, "val@acme.example", "partner-viewer-join-code", "Join")
    press(d, link(d, "Partner tokens"))
    assert not has_button(d, "Create token") and not has_button(d, "Rotate") and not has_button(d, "Revoke")
    run.check("partner-viewer-tokens")
    press(d, link(d, "Team"))
    assert not has_button(d, "Send invitation") and not has_button(d, "Remove")
    run.step("a viewer sees the tokens and the team but no action")
    d.get(f"{base}/console/partners/{other_partner}")
    assert d.find_element(By.TAG_NAME, "h1").text == "Not found", d.page_source
    run.check("partner-other-refused")
    run.step("another partner's dashboard is not found")


def main():
    base, invite, email, shots, outbox, expired, partner_join, other_partner, checkout = \
        sys.argv[1:10]
    os.makedirs(shots, exist_ok=True)
    driver = browser()
    run = Run(driver, shots)
    try:
        d = driver
        d.get(base + invite)
        run.check("invitation")
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys(PASSWORD)
        press(d, button(d, "Continue"))
        # A link proves nothing: the code mailed to the address does (DESIGN §6c).
        prove(d, run, outbox, email, "invitation-code", "Activate the organization")
        assert "/console/orgs/" in d.current_url, (d.current_url, d.find_element(By.TAG_NAME, "main").text)
        assert d.find_element(By.TAG_NAME, "h1").text.startswith("Org "), d.page_source
        assert "Available" in d.page_source
        run.step("activated and signed up")
        run.check("organization-overview")
        press(d, button(d, "Sign out"))
        assert d.current_url.endswith("/console/sign-in"), d.current_url
        run.check("sign-in")
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys("not the password at all")
        press(d, button(d, "Sign in"))
        alert = d.find_element(By.CSS_SELECTOR, "[role=alert]").text
        assert "not correct" in alert, alert
        run.step("wrong password refused")
        run.check("sign-in-refused")
        field(d, "Email").clear()
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys(PASSWORD)
        press(d, button(d, "Sign in"))
        assert d.current_url.endswith("/console/"), d.current_url
        run.check("organizations")
        press(d, link(d, d.find_element(By.CSS_SELECTOR, "ul.list a").text))
        assert "/console/orgs/" in d.current_url
        run.step("signed in and opened the organization")
        overview = d.current_url
        press(d, link(d, "API keys"))
        run.check("keys")
        field(d, "Name").send_keys("browser key")
        press(d, button(d, "Create key"))
        secret = d.find_element(By.ID, "new-key").text.strip()
        assert secret.startswith("tgk_"), secret
        run.check("key-created")
        chat = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
        answer = urllib.request.urlopen(urllib.request.Request(
            base + "/compat/v1/chat/completions", data=chat.encode(),
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}))
        assert answer.status == 200
        run.step("created a key and called the gateway with it")
        for _ in range(60):
            d.get(overview)
            cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, "table.data tbody tr:first-child td")]
            if len(cells) == 3 and cells[1] == "1":
                break
            time.sleep(0.25)
        assert cells[1] == "1", cells
        run.check("organization-overview-with-usage")
        run.step("the call shows in today's spend")
        press(d, link(d, "Usage"))
        rows = {tr.find_element(By.TAG_NAME, "th").text.strip(): [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in d.find_elements(By.CSS_SELECTOR, "table.data tbody tr")}
        assert rows.get("gpt-4o-mini", [None])[0] == "1", rows
        assert "gpt-4o-mini" in d.find_element(By.CSS_SELECTOR, "ul.legend").text
        assert link(d, "Download CSV").get_attribute("href").count("/usage.csv?") == 1
        run.check("usage")
        press(d, link(d, "Last 7 days, by hour"))
        assert len(d.find_elements(By.CSS_SELECTOR, "figure.chart g.col")) == 7 * 24
        assert Select(field(d, "Buckets")).first_selected_option.text.startswith("By hour")
        Select(field(d, "Break down by")).select_by_visible_text("API key")
        press(d, button(d, "Show usage"))
        columns = d.find_elements(By.CSS_SELECTOR, "figure.chart g.col")
        assert len(columns) == 7 * 24, len(columns)
        assert "browser key" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
        run.check("usage-hourly")
        field(d, "From (UTC date)").clear()
        field(d, "From (UTC date)").send_keys("01/01/2020")
        press(d, button(d, "Show usage"))
        alert = d.find_element(By.CSS_SELECTOR, "[role=alert]").text
        assert "at most 7 days" in alert, alert
        assert field(d, "From (UTC date)").get_attribute("aria-invalid") == "true"
        run.check("usage-refused")
        run.step("the call shows on the usage page, by day and by hour; a bad window is explained")
        # The Requests page (issue 45): ten more calls; pages of ten, newest first; filters.
        called = [answer.headers["x-request-id"]]
        for _ in range(10):
            more = urllib.request.urlopen(urllib.request.Request(
                base + "/compat/v1/chat/completions", data=chat.encode(),
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}))
            called.append(more.headers["x-request-id"])
        newest_first = list(reversed(called))
        press(d, link(d, "Requests"))
        requests_url = d.current_url
        for _ in range(60):
            shown = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.requests code.id")]
            if len(shown) == len(called):
                break
            time.sleep(0.25)
            d.get(requests_url)
        assert shown == newest_first, (shown, newest_first)
        assert secret not in d.page_source, "no key secret on the Requests page"
        run.check("requests")
        Select(field(d, "Rows per page")).select_by_visible_text("10")
        press(d, button(d, "Show requests"))
        shown = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.requests code.id")]
        assert shown == newest_first[:10], shown
        press(d, link(d, "Older calls"))
        shown = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.requests code.id")]
        assert shown == newest_first[10:], shown
        assert not d.find_elements(By.XPATH, "//a[normalize-space()='Older calls']")
        run.check("requests-older")
        press(d, link(d, "Newest calls"))
        Select(field(d, "Outcome")).select_by_visible_text("Failed (status 400 or above)")
        press(d, button(d, "Show requests"))
        assert "No call matches" in d.find_element(By.TAG_NAME, "main").text, d.page_source
        run.check("requests-failed-none")
        Select(field(d, "Outcome")).select_by_visible_text("Succeeded")
        keys = Select(field(d, "API key"))
        keys.select_by_visible_text([o.text for o in keys.options if o.text.startswith("browser key")][0])
        Select(field(d, "Model")).select_by_visible_text("gpt-4o-mini")
        today = datetime.datetime.now(datetime.timezone.utc)
        field(d, "Day (UTC)").send_keys(today.strftime("%m/%d/%Y"))
        press(d, button(d, "Show requests"))
        shown = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.requests code.id")]
        assert shown == newest_first[:10], shown
        assert f"day={today.strftime('%Y-%m-%d')}" in d.current_url, d.current_url
        run.check("requests-filtered")
        run.step("the calls show on the Requests page newest first, ten to a page, by outcome, key, model and day")
        # Batches (issue 46): a three-line batch through the API; the Batches page shows it
        # with its lines and spend, and the Requests page tags its calls.
        lines = "".join(json.dumps({"custom_id": f"b-{i}", "method": "POST", "url": "/v1/chat/completions",
                                    "body": {"model": "gpt-4o-mini", "max_tokens": 8,
                                             "messages": [{"role": "user", "content": f"line {i}"}]}}) + "\n"
                        for i in range(3))
        boundary = "console-batch-boundary"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
                f"Content-Type: application/jsonl\r\n\r\n{lines}\r\n--{boundary}--\r\n")
        auth = {"Authorization": f"Bearer {secret}"}
        uploaded = json.load(urllib.request.urlopen(urllib.request.Request(
            base + "/compat/v1/files", data=form.encode(),
            headers={**auth, "Content-Type": f"multipart/form-data; boundary={boundary}"})))
        batch = json.load(urllib.request.urlopen(urllib.request.Request(
            base + "/compat/v1/batches", data=json.dumps({
                "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions",
                "completion_window": "24h"}).encode(),
            headers={**auth, "Content-Type": "application/json"})))
        for _ in range(240):
            state = json.load(urllib.request.urlopen(urllib.request.Request(
                base + "/compat/v1/batches/" + batch["id"], headers=auth)))
            if state["status"] == "completed":
                break
            time.sleep(0.25)
        assert state["status"] == "completed", state
        press(d, link(d, "Batches"))
        batches_url = d.current_url
        # The batch ends when its lines are answered; their usage is booked by the settler just
        # after: the page shows the spend booked so far.
        for _ in range(60):
            cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, "table.batches tbody tr:first-child td")]
            if len(cells) == 5 and cells[4].endswith("3 calls booked"):
                break
            time.sleep(0.25)
            d.get(batches_url)
        assert batch["id"] in cells[0], cells
        assert "OpenAI batch" in cells[0], cells
        assert cells[2] == "completed", cells
        assert cells[3].startswith("3") and "3 succeeded" in cells[3], cells
        assert cells[4].endswith("3 calls booked") and not cells[4].startswith("0.00\n"), cells
        run.check("batches")
        press(d, link(d, "Requests"))
        tags = d.find_elements(By.XPATH, "//table[contains(@class,'requests')]//span[@class='tag' and normalize-space()='batch']")
        assert len(tags) == 3, len(tags)
        assert batch["id"] in d.find_element(By.CSS_SELECTOR, "table.requests").text
        run.check("requests-batch")
        run.step("a batch shows on the Batches page with its lines and spend, its calls tagged on the Requests page")
        d.get(overview.rstrip("/") + "/keys")
        press(d, button(d, "Disable"))
        assert "disabled" in d.find_element(By.CSS_SELECTOR, "table.data tbody").text
        try:
            urllib.request.urlopen(urllib.request.Request(
                base + "/compat/v1/chat/completions", data=chat.encode(),
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}))
            raise AssertionError("a disabled key was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 401, e.code
        run.check("key-disabled")
        run.step("disabled the key; the gateway refuses it")
        press(d, link(d, "Billing token"))
        run.check("billing-token")
        press(d, button(d, "Create token"))
        token = d.find_element(By.ID, "new-token").text.strip()
        balance_url = base + "/api/v1/organization/billing/balance"
        balance = urllib.request.urlopen(urllib.request.Request(
            balance_url, headers={"Authorization": f"Bearer {token}"}))
        assert balance.status == 200
        assert json.load(balance)["data"]["status"] == "reconciled"
        run.check("billing-token-created")
        run.step("created a billing token and read the billing API with it")
        d.get(d.current_url)
        assert token not in d.page_source, "a token is shown once"
        press(d, button(d, "Rotate token"))
        rotated = d.find_element(By.ID, "new-token").text.strip()
        assert rotated != token
        assert status_of(balance_url, token) == 401
        assert status_of(balance_url, rotated) == 200
        run.check("billing-token-rotated")
        d.get(d.current_url)
        press(d, button(d, "Revoke token"))
        assert "No active billing token" in d.page_source, d.page_source
        assert status_of(balance_url, rotated) == 401
        run.check("billing-token-revoked")
        run.step("rotated the billing token (the old one refused at once) and revoked it")
        press(d, link(d, "Members"))
        assert "ann@browser.example (you)" in d.page_source, d.page_source
        run.check("members")
        field(d, "Email address").send_keys("bo@browser.example")
        Select(field(d, "Role")).select_by_visible_text("member")
        press(d, button(d, "Send invitation"))
        join = d.find_element(By.ID, "join-link").text.strip()
        assert "/console/join/" in join, join
        assert "bo@browser.example" in d.page_source
        run.check("members-invited")
        press(d, link(d, "Audit log"))
        assert "member invited" in d.page_source, d.page_source
        run.check("audit")
        run.step("invited a member and read the audit log")
        # A stale form (its token no longer the session's): refused, nothing changed.
        press(d, link(d, "Members"))
        d.execute_script("document.querySelector('form[action$=\"/members\"] input[name=csrf]').value = 'stale'")
        field(d, "Email address").send_keys("eve@browser.example")
        press(d, button(d, "Send invitation"))
        assert d.find_element(By.TAG_NAME, "h1").text == "Request refused", d.page_source
        run.check("csrf-refused")
        d.get(overview.rstrip("/") + "/members")
        assert "eve@browser.example" not in d.page_source
        run.step("a stale form is refused and changes nothing")
        press(d, button(d, "Sign out"))
        # The link names the configured public URL; the test's server listens elsewhere.
        d.get(base + join[join.find("/console/join/"):])
        run.check("join")
        field(d, "Email").send_keys("bo@browser.example")
        field(d, "Password").send_keys(PASSWORD)
        press(d, button(d, "Continue"))
        prove(d, run, outbox, "bo@browser.example", "join-code", "Join")
        assert d.find_element(By.TAG_NAME, "h1").text.startswith("Org "), d.page_source
        press(d, link(d, "API keys"))
        assert "browser key" in d.page_source
        assert not has_button(d, "Create key") and not has_button(d, "Disable")
        run.check("member-keys")
        press(d, link(d, "Billing token"))
        assert not any(has_button(d, t) for t in ("Create token", "Rotate token", "Revoke token"))
        run.check("member-billing-token")
        press(d, link(d, "Members"))
        assert not has_button(d, "Send invitation") and not has_button(d, "Remove")
        assert not [a for a in d.find_elements(By.TAG_NAME, "a") if a.text.strip() == "Audit log"]
        run.check("member-members")
        run.step("a member sees keys, token and members but no action on them")
        press(d, button(d, "Sign out"))
        press(d, link(d, "Forgot your password?"))
        run.check("reset-request")
        seen = set(os.listdir(outbox))
        field(d, "Email").send_keys(email)
        press(d, button(d, "Send reset link"))
        run.check("reset-requested")
        reset = mailed_link(outbox, "/console/reset/", seen)
        d.get(base + reset[reset.find("/console/reset/"):])
        run.check("reset-form")
        field(d, "New password").send_keys("a brand new pass phrase")
        press(d, button(d, "Set password"))
        run.check("reset-done")
        d.get(base + "/console/sign-in")
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys("a brand new pass phrase")
        press(d, button(d, "Sign in"))
        assert d.current_url.endswith("/console/"), d.current_url
        run.step("reset the password by the mailed link and signed in with the new one")
        press(d, button(d, "Sign out"))
        # The limiter: 8 attempts per address go at once, the ninth waits.
        for attempt in range(12):
            field(d, "Email").clear()
            field(d, "Email").send_keys("nobody@browser.example")
            field(d, "Password").send_keys(f"guess number {attempt}")
            press(d, button(d, "Sign in"))
            alert = d.find_element(By.CSS_SELECTOR, "[role=alert]").text
            if "Too many" in alert:
                break
            assert "not correct" in alert, alert
        assert "Too many" in alert and attempt == 8, (attempt, alert)
        run.check("sign-in-throttled")
        run.step("sign-in throttled after repeated wrong passwords")
        d.get(base + expired)
        assert "expired" in d.find_element(By.TAG_NAME, "main").text, d.page_source
        run.check("invitation-expired")
        d.get(base + invite)
        assert "already accepted" in d.page_source, d.page_source
        run.check("invitation-spent")
        run.step("expired and spent invitations explained")
        # The account page: two-factor sign-in with an authenticator app.
        d.get(base + "/console/sign-in")
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys("a brand new pass phrase")
        press(d, button(d, "Sign in"))
        press(d, link(d, email))
        assert d.find_element(By.TAG_NAME, "h1").text == "Your account", d.page_source
        run.check("account")
        field(d, "Current password").send_keys("a brand new pass phrase")
        press(d, button(d, "Set up two-factor"))
        key = d.find_element(By.ID, "totp-key").text
        run.check("account-two-factor-setup")
        field(d, "Code from your app").send_keys(totp(key))
        press(d, button(d, "Turn on two-factor"))
        codes = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#recovery-codes code")]
        assert len(codes) == 10, d.page_source
        run.check("account-two-factor-on")
        press(d, button(d, "Sign out"))
        field(d, "Email").send_keys(email)
        field(d, "Password").send_keys("a brand new pass phrase")
        press(d, button(d, "Sign in"))
        run.check("sign-in-second-factor")
        field(d, "Authentication code").send_keys(codes[0])
        press(d, button(d, "Sign in"))
        assert d.current_url.endswith("/console/"), d.current_url
        run.step("turned on two-factor sign-in on the account page and signed in with a recovery code")
        partner_flow(d, run, base, partner_join, other_partner, outbox, checkout)
        print(json.dumps({"steps": run.steps, "pages": run.pages}), flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - reported to the Rust test
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}),
              flush=True)
