#!/usr/bin/python3
"""A tiny WebKitGTK browser for WebKitWebDriver (W3C WebDriver) in the tests.

Debian's MiniBrowser runs automation sessions in an ephemeral data store, where OPFS and
IndexedDB do not persist; this one keeps a real profile directory (--profile=DIR), so a reload
proves durability. With --safari-features it switches on the Storage and File System APIs that
Safari ships and WebKitGTK ships off; without it, WebKitGTK's defaults apply (no
navigator.storage), which is how the fallback storage is tested.
WebKitWebDriver starts it as `browser.py --automation [args]`.
"""
import sys

import gi

gi.require_version("Gtk", "3.0")
gi.require_version("WebKit2", "4.1")
from gi.repository import Gtk, WebKit2  # noqa: E402

SAFARI_FEATURES = {
    "StorageAPI",
    "StorageAPIEstimate",
    "FileSystem",
    "FileSystemWritableStream",
    "AccessHandle",
}


def main(argv):
    profile = "/tmp/simplysync-webkit-profile"
    safari = False
    for arg in argv:
        if arg.startswith("--profile="):
            profile = arg.split("=", 1)[1]
        elif arg == "--safari-features":
            safari = True
    manager = WebKit2.WebsiteDataManager(
        base_data_directory=profile + "/data", base_cache_directory=profile + "/cache"
    )
    context = WebKit2.WebContext.new_with_website_data_manager(manager)
    context.set_automation_allowed(True)
    settings = WebKit2.Settings()
    settings.set_enable_write_console_messages_to_stdout(True)
    if safari:
        features = WebKit2.Settings.get_all_features()
        for i in range(features.get_length()):
            feature = features.get(i)
            if feature.get_identifier() in SAFARI_FEATURES:
                settings.set_feature_enabled(feature, True)
    windows = []

    def create_web_view(_session):
        view = WebKit2.WebView(web_context=context, settings=settings, is_controlled_by_automation=True)
        window = Gtk.Window()
        window.set_default_size(900, 700)
        window.add(view)
        window.show_all()
        windows.append(window)
        return view

    def automation_started(_context, session):
        info = WebKit2.ApplicationInfo()
        info.set_name("SimplySyncTestBrowser")
        info.set_version(1, 0, 0)
        session.set_application_info(info)
        session.connect("create-web-view", create_web_view)

    context.connect("automation-started", automation_started)
    Gtk.main()


if __name__ == "__main__":
    main(sys.argv[1:])
