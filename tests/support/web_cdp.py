#!/usr/bin/python3
"""web_cdp.py: drives dtq-web's page in headless Chromium over the DevTools protocol, as a
person would: real mouse clicks (Input.dispatchMouseEvent at the element's centre) and
typing (Input.insertText). Used by web_browser.sh.

    web_cdp.py CHROMIUM PROFILE_DIR BASE_URL TOKEN TASK_ID

1. opens BASE_URL#/dlq and waits for the dead letter TASK_ID;
2. clicks its Requeue button without a token: the page must refuse (toast) and open the
   token form;
3. types TOKEN into the form and clicks Save;
4. clicks Requeue again: the page must report "requeue TASK_ID: queued".
Exit 0 on success; 1 with the reason otherwise. The caller checks Redis afterwards.

    web_cdp.py CHROMIUM PROFILE_DIR BASE_URL READ_TOKEN TASK_ID read-token

against a dtq-web started with a read token file:
1. opens BASE_URL#/task/TASK_ID: the page must say a token is needed and open the form;
2. types READ_TOKEN and clicks Save: the task must show, its payload included;
3. opens #/events: the stream (read with the token) must show the backlog's events.

    web_cdp.py CHROMIUM PROFILE_DIR BASE_URL TOKEN TASK_ID scheduled

1. opens BASE_URL#/scheduled and waits for the delayed task TASK_ID (Run now disabled);
2. saves TOKEN through the token form, ticks the task's checkbox, clicks Run now: the page
   must report "run now: 1 done" and the row must leave the list;
3. opens the task's page: it must say queued.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

import websocket  # Debian: python3-websocket


class Page:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if msg.get("method") == "Page.javascriptDialogOpening":
                self.call("Page.handleJavaScriptDialog", accept=True)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, expr, what, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        raise RuntimeError("timed out waiting for " + what)

    def click(self, selector):
        """A real click: scroll the element into view, press and release at its centre."""
        box = self.wait(
            "(() => { const e = document.querySelector(%s); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return r.width > 0 ? {x: r.x + r.width / 2, y: r.y + r.height / 2} : null; })()"
            % json.dumps(selector), selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                      button="left", clickCount=1)


def toast_with(page, text):
    return page.wait(
        "Array.from(document.querySelectorAll('#toasts .toast')).map(t => t.textContent)"
        ".find(t => t.includes(%s)) || null" % json.dumps(text), "a toast saying " + text)


def read_token(page, base, token, task):
    page.call("Page.navigate", url=base + "/#/task/" + task)
    page.wait("document.getElementById('view')?.dataset.state === 'unauthorized'",
              "the page to say a token is needed")
    page.wait("document.getElementById('token-panel')?.hidden === false", "the token form")
    print("web_cdp: without a token the page asks for one")
    page.click("#token-input")
    page.call("Input.insertText", text=token)
    page.click("#token-save")
    toast_with(page, "token saved")
    page.wait("document.getElementById('view')?.dataset.state === 'ready'"
              " && !!document.getElementById('payload')", "the task with the token")
    print("web_cdp: with the read token the task shows")
    page.call("Page.navigate", url=base + "/#/events")
    page.wait("document.querySelectorAll('#event-rows tr').length > 0", "events on the stream")
    page.wait("(document.getElementById('event-status')?.textContent || '').startsWith('following')",
              "the stream followed")
    print("web_cdp: the event stream shows events with the read token")
    return 0


def scheduled(page, base, token, task):
    """The Scheduled tab: select the delayed task TASK_ID, click Run now; it leaves the list
    and its page says queued."""
    page.call("Page.navigate", url=base + "/#/scheduled")
    row = 'tr[data-task=%s]' % json.dumps(task)
    page.wait("!!document.querySelector(%s)" % json.dumps(row + " input.select-row"),
              "the delayed task " + task)
    page.wait("document.querySelector('button[data-action=\"run-now\"]').disabled",
              "Run now disabled with nothing selected")
    print("web_cdp: the Scheduled tab lists %s" % task)
    page.click("#token-button")
    page.click("#token-input")
    page.call("Input.insertText", text=token)
    page.click("#token-save")
    toast_with(page, "token saved")
    page.click(row + " input.select-row")
    page.wait("document.getElementById('selected-count').textContent === '1 selected'",
              "one task selected")
    page.wait("!document.querySelector('button[data-action=\"run-now\"]').disabled",
              "Run now enabled")
    page.click('button[data-action="run-now"]')
    toast_with(page, "run now: 1 done")
    page.wait("!document.querySelector(%s)" % json.dumps(row), "the row to go")
    print("web_cdp: selected %s and clicked Run now; it left the list" % task)
    page.call("Page.navigate", url=base + "/#/task/" + task)
    page.wait("document.getElementById('view')?.dataset.state === 'ready' &&"
              " !!document.querySelector('#view .badge.queued')", "the task page to say queued")
    print("web_cdp: the task page says queued")
    return 0


def main():
    chromium, profile, base, token, task = sys.argv[1:6]
    proc = subprocess.Popen(
        [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
         "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir=" + profile,
         "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(profile, "..", "chromium.log"), "w"))
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        end = time.time() + 30
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if time.time() > end or proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%s/json/list" % port))
        page = Page([t for t in targets if t["type"] == "page"][0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Runtime.enable")
        if len(sys.argv) > 6 and sys.argv[6] == "read-token":
            return read_token(page, base, token, task)
        if len(sys.argv) > 6 and sys.argv[6] == "scheduled":
            return scheduled(page, base, token, task)
        page.call("Page.navigate", url=base + "/#/dlq")
        row = 'tr[data-task=%s]' % json.dumps(task)
        page.wait("!!document.querySelector(%s)" % json.dumps(row + ' button[data-action="requeue"]'),
                  "the dead letter " + task)
        print("web_cdp: the dead letter %s is listed" % task)

        # without a token the page refuses and asks for one; nothing is sent
        page.click(row + ' button[data-action="requeue"]')
        toast_with(page, "enter the bearer token first")
        page.wait("!document.getElementById('token-panel').hidden", "the token form")
        print("web_cdp: without a token the click was refused")

        # type the token (as keystrokes into the focused field) and save it
        page.click("#token-input")
        page.call("Input.insertText", text=token)
        page.click("#token-save")
        toast_with(page, "token saved")
        page.wait("document.getElementById('mode').textContent === 'writes enabled'",
                  "writes enabled")

        # the real click on Requeue
        page.click(row + ' button[data-action="requeue"]')
        toast_with(page, "requeue %s: queued" % task)
        print("web_cdp: clicked Requeue; the page reports the task queued")
        # the list refreshes without it
        page.wait("!document.querySelector(%s)" % json.dumps(row), "the row to go")
        return 0
    except Exception as e:  # noqa: BLE001 - one line for the test log
        print("web_cdp: FAILED: %s" % e)
        return 1
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
