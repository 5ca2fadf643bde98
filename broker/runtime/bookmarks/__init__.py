"""broker/runtime/bookmarks"""
