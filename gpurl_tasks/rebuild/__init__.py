"""rebuild"""
